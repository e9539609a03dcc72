"""docs/configuration.md stays the complete reference: every key of the structured configs and every
option of every config group is named on it."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from mathneuro.methods.registry import METHODS
from mathneuro.pipeline.cli import config_dir
from mathneuro.pipeline.config import Config

ROOT = Path(__file__).resolve().parents[1]
PAGE = (ROOT / "docs" / "configuration.md").read_text()
GROUPS = ("model", "task", "filter", "filters", "method", "intervention", "eval", "logger", "experiment", "hparams_search",
          "hydra/launcher")


def keys_of(obj: object, prefix: str = "") -> list[str]:
    """Dotted keys of a structured config instance, nested dataclasses walked (``method`` apart)."""
    out = []
    for field in dataclasses.fields(obj):
        value = getattr(obj, field.name)
        key = f"{prefix}{field.name}"
        if dataclasses.is_dataclass(value):
            out += keys_of(value, f"{key}.")
        elif key not in ("method", "intervention"):
            out.append(key)
    return out


def builtin_method_keys() -> list[str]:
    keys = set()
    for name in METHODS.names():
        spec = METHODS.get(name)
        if spec.fn.__module__.startswith("mathneuro."):  # a user's plugin a test registered is not ours to document
            keys |= {f"method.{f.name}" for f in dataclasses.fields(spec.config)}
    return sorted(keys)


def builtin_intervention_keys() -> list[str]:
    from mathneuro.edit.interventions.registry import BUILTIN_INTERVENTIONS, INTERVENTIONS

    return sorted({f"intervention.{f.name}" for name in BUILTIN_INTERVENTIONS
                   for f in dataclasses.fields(INTERVENTIONS.get(name).config)})


def documented(key: str) -> bool:
    return f"`{key}`" in PAGE


def test_every_structured_config_key_is_documented():
    keys = keys_of(Config()) + builtin_method_keys() + builtin_intervention_keys()
    assert "eval.arith.num_fewshot" in keys and "method.share" in keys and "task.template" in keys
    assert "intervention.steps" in keys and "intervention.relative_std" in keys
    missing = [k for k in keys if not documented(k)]
    assert not missing, f"docs/configuration.md lacks {missing}"


def test_every_group_option_is_documented():
    conf = Path(config_dir())
    missing = []
    for group in GROUPS:
        options = sorted(p.stem for p in (conf / group).glob("*.yaml"))
        assert options, group
        row = next((line for line in PAGE.splitlines() if line.startswith(f"| `{group}` |")), "")
        missing += [f"{group}={o}" for o in options if f"`{o}`" not in row]
    assert not missing, f"docs/configuration.md's group table lacks {missing}"

