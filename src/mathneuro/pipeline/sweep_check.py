"""Before a multirun starts: every ``method.<setting>`` and ``intervention.<setting>`` given must apply to
some method (intervention) of the sweep.

A setting that fits no plugin of the run would be ignored at every point, silently; it is refused
instead (exit 2, one line naming the key). A setting that fits some methods of a sweep across
methods (``method=mathneuro,lape method.share=all``) is logged and recorded as ignored at the points
of the others (:func:`mathneuro.pipeline.runner.ignored_settings`); the same holds for interventions.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from hydra.core.override_parser.overrides_parser import OverridesParser

from mathneuro.edit.interventions.registry import INTERVENTIONS
from mathneuro.methods.registry import METHODS
from mathneuro.pipeline.errors import ConfigError
from mathneuro.util.plugins import setting_overrides
from mathneuro.util.registry import Registry

#: The plugin groups a sweep's settings are checked for: config key -> registry.
GROUPS: dict[str, Registry] = {"method": METHODS, "intervention": INTERVENTIONS}


def _values(override: Any) -> list[str]:
    if override.is_sweep_override():
        return [str(v) for v in override.sweep_string_iterator()]
    return [str(override.value())]


def sweep_choices(overrides: Sequence[str], params: Mapping[str, str] | None, group: str,
                  name_of_option: Callable[[str], str], default: str) -> list[str]:
    """The plugin names of ``group`` (``method``, ``intervention``) a sweep runs: its ``<group>=`` options
    (through ``name_of_option``) and its ``<group>.name=`` values, from the command line and the sweeper's
    ``params``; else ``default``."""
    lines = list(overrides) + [f"{k}={v}" for k, v in (params or {}).items()]
    names: list[str] = []
    for override in OverridesParser.create().parse_overrides(lines):
        key = override.get_key_element().lstrip("+~")
        if key == group:
            names += [name_of_option(v) for v in _values(override)]
        elif key in (f"{group}.name", f"{group}._target_"):
            names += _values(override)
    return list(dict.fromkeys(names)) or [default]


def check_sweep_settings(settings: Iterable[str], names: Iterable[str], group: str = "method") -> None:
    """Refuse (ConfigError naming the key) a ``<group>.<setting>`` that no plugin in ``names`` has."""
    names, registry = list(names), GROUPS[group]
    specs = [registry.get(name) for name in names]
    for key in settings:
        name = key.removeprefix(f"{group}.").split(".", 1)[0]
        if not any(name in spec.settings() for spec in specs):
            have = sorted({s for spec in specs for s in spec.settings()})
            raise ConfigError(f"{key}: not a setting of any {registry.kind} of this run ({', '.join(names)}); "
                              f"their settings: {', '.join(have) or 'none'}")


def check_multirun(config: Any) -> None:
    """The check above for a multirun's primary config, for each group (a Hydra callback calls it before any job)."""
    from hydra import compose  # deferred: only a multirun with plugin settings composes

    hydra_cfg = config.hydra
    overrides = list(hydra_cfg.overrides.task)
    params = dict(hydra_cfg.sweeper.get("params") or {})
    given = overrides + [f"{k}={v}" for k, v in params.items()]
    for group in GROUPS:
        settings = setting_overrides(given, group)
        if not settings:
            continue

        def name_of_option(option: str, group: str = group) -> str:
            return str(compose(config_name=hydra_cfg.job.config_name, overrides=[f"{group}={option}"])[group].name)

        names = sweep_choices(overrides, params, group, name_of_option, str(config[group].name))
        check_sweep_settings(settings, names, group)
