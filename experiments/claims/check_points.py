"""Check the points of a planned sweep before hours are spent on it: no model is loaded.

    python experiments/claims/check_points.py OVERRIDE...      # the overrides of one `mathneuro -m` line

Composes the config as `mathneuro` does, once with the first value of every swept key and once for
each further value of each swept key (one key varied at a time), and runs the runner's validation
on each: task and filter files, evaluated task names and their data files, limits, method, dtype.
Also refuses a `method.<setting>` (`intervention.<setting>`) that no method (intervention) of the sweep has, an
`eval.limits.<task>` whose task is not evaluated (a typo that would silently leave a task unlimited) and a model file
that is missing or damaged. Prints one line per problem and exits 2 on the first bad composition; prints "ok: N
composition(s)" otherwise.
"""

from __future__ import annotations

import sys

from hydra import compose, initialize_config_dir
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import OmegaConf

from mathneuro.cli.run import config_dir, job_dirname, open_mapping_overrides
from mathneuro.pipeline.config import ConfigError, register_configs, validate
from mathneuro.pipeline.preflight import check_model_source
from mathneuro.pipeline.sweep_check import GROUPS, check_sweep_settings
from mathneuro.util.plugins import plugin_name, setting_overrides


def compositions(overrides: list[str]) -> list[list[str]]:
    """The override lists to check: every swept key at its first value, then each other value in turn."""
    parsed = OverridesParser.create().parse_overrides(overrides)
    fixed = [o.input_line for o in parsed if not o.is_sweep_override()]
    swept = [(o.get_key_element(), list(o.sweep_string_iterator())) for o in parsed if o.is_sweep_override()]
    first = {key: values[0] for key, values in swept}
    out = [fixed + [f"{k}={v}" for k, v in first.items()]]
    for key, values in swept:
        for value in values[1:]:
            out.append(fixed + [f"{k}={value if k == key else v}" for k, v in first.items()])
    return out


def check(overrides: list[str]) -> dict[str, str]:
    """Validate one composition and return its method's and intervention's names; raise ConfigError (one line)
    on the first problem."""
    cfg = OmegaConf.to_object(compose(config_name="config", overrides=overrides))
    validate(cfg)
    given = [o.lstrip("+").split("=", 1)[0] for o in overrides if o.lstrip("+").startswith("eval.limits.")]
    for key in given:  # a limit given here (not an eval config's default) for a task that is not evaluated
        task = key[len("eval.limits."):]
        if task not in cfg.eval.tasks:
            raise ConfigError(f"{key}: {task!r} is not in eval.tasks {list(cfg.eval.tasks)}")
    check_model_source(cfg.model.name_or_path, cfg.model.gguf_file)
    return {group: plugin_name(getattr(cfg, group)) for group in GROUPS}


def main(argv: list[str]) -> int:
    # hydra/ and hparams_search overrides configure the sweep itself, not a point
    args = [a for a in open_mapping_overrides(argv) if not a.lstrip("+~").startswith(("hydra", "hparams_search"))]
    register_configs()
    if not OmegaConf.has_resolver("mathneuro_dirname"):
        OmegaConf.register_new_resolver("mathneuro_dirname", job_dirname)
    try:
        runs = compositions(args)
        with initialize_config_dir(config_dir=config_dir(), version_base="1.3"):
            chosen = [check(overrides) for overrides in runs]
        for group in GROUPS:  # a method.<setting> (intervention.<setting>) that no method (intervention) has
            check_sweep_settings(setting_overrides(args, group), dict.fromkeys(c[group] for c in chosen), group)
    except (ConfigError, ValueError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:  # noqa: BLE001 - Hydra/OmegaConf composition and parse errors: one line
        first = str(exc).splitlines()[0] if str(exc) else ""
        print(f"error: {type(exc).__name__}: {first}", file=sys.stderr)
        return 2
    print(f"ok: {len(runs)} composition(s)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
