"""Before a multirun starts: every ``method.<setting>`` given must apply to some method of the sweep.

A setting that fits no method of the run would be ignored at every point, silently; it is refused
instead (exit 2, one line naming the key). A setting that fits some methods of a sweep across
methods (``method=mathneuro,lape method.share=all``) is logged and recorded as ignored at the points
of the others (:func:`mathneuro.pipeline.runner.ignored_settings`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from hydra.core.override_parser.overrides_parser import OverridesParser

from mathneuro.methods.registry import METHODS
from mathneuro.pipeline.errors import ConfigError
from mathneuro.pipeline.point import method_overrides


def _values(override: Any) -> list[str]:
    if override.is_sweep_override():
        return [str(v) for v in override.sweep_string_iterator()]
    return [str(override.value())]


def sweep_methods(overrides: Sequence[str], params: Mapping[str, str] | None,
                  method_of_option: Callable[[str], str], default: str) -> list[str]:
    """The method names a sweep runs: its ``method=`` group options (through ``method_of_option``) and its
    ``method.name=`` values, from the command line and the sweeper's ``params``; else ``default``."""
    lines = list(overrides) + [f"{k}={v}" for k, v in (params or {}).items()]
    names: list[str] = []
    for override in OverridesParser.create().parse_overrides(lines):
        key = override.get_key_element().lstrip("+~")
        if key == "method":
            names += [method_of_option(v) for v in _values(override)]
        elif key in ("method.name", "method._target_"):
            names += _values(override)
    return list(dict.fromkeys(names)) or [default]


def check_sweep_settings(settings: Iterable[str], methods: Iterable[str]) -> None:
    """Refuse (ConfigError naming the key) a ``method.<setting>`` that no method in ``methods`` has."""
    methods = list(methods)
    specs = [METHODS.get(name) for name in methods]
    for key in settings:
        name = key.removeprefix("method.").split(".", 1)[0]
        if not any(name in spec.settings() for spec in specs):
            have = sorted({s for spec in specs for s in spec.settings()})
            raise ConfigError(f"{key}: not a setting of any method of this run ({', '.join(methods)}); "
                              f"their settings: {', '.join(have) or 'none'}")


def check_multirun(config: Any) -> None:
    """The check above for a multirun's primary config (a Hydra callback calls it before any job)."""
    from hydra import compose  # deferred: only a multirun with method settings composes

    hydra_cfg = config.hydra
    overrides = list(hydra_cfg.overrides.task)
    params = dict(hydra_cfg.sweeper.get("params") or {})
    settings = method_overrides(overrides + [f"{k}={v}" for k, v in params.items()])
    if not settings:
        return

    def method_of_option(option: str) -> str:
        return str(compose(config_name=hydra_cfg.job.config_name, overrides=[f"method={option}"]).method.name)

    check_sweep_settings(settings, sweep_methods(overrides, params, method_of_option, str(config.method.name)))
