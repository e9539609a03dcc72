"""docs/configuration.md stays the complete reference: every key of the structured configs and every
option of every config group is named on it."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from mathneuro.cli.run import config_dir
from mathneuro.data.datasets import DatasetConfig
from mathneuro.methods.registry import METHODS
from mathneuro.pipeline.config import Config

ROOT = Path(__file__).resolve().parents[1]
PAGE = (ROOT / "docs" / "configuration.md").read_text()
GROUPS = ("model", "task", "filter", "filters", "method", "intervention", "eval", "logger", "experiment",
          "hparams_search", "hydra/launcher")


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
    # filter: optional
    keys = (keys_of(dataclasses.replace(Config(), filter=DatasetConfig())) + builtin_method_keys()
            + builtin_intervention_keys())
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



def documented_keys() -> list[str]:
    """The dotted keys the tables of docs/configuration.md name in their first column."""
    import re

    keys = []
    for line in PAGE.splitlines():
        cells = line.split("|")
        if not line.startswith("| `") or len(cells) < 3:
            continue
        for key in re.findall(r"`([^`]+)`", cells[1]):
            if "." in key and not any(c in key for c in "*=<>/ ") and not key.isupper():
                keys.append(key)
    return keys


def composed(overrides: list[str] | None = None):
    from hydra import compose, initialize_config_dir

    from mathneuro.pipeline.config import register_configs

    register_configs()
    with initialize_config_dir(config_dir=config_dir(), version_base="1.3"):
        return compose(config_name="config", overrides=overrides or [], return_hydra_config=True)


def test_every_documented_key_is_in_the_composed_config():
    """Each key the tables name can be overridden as documented (``key=value``, no ``+``): it is in the
    composed config (``hydra.*`` keys in Hydra's; ``method.*`` in the schema's method node)."""
    from omegaconf import OmegaConf

    cfg = composed()
    keys = documented_keys()
    assert "hydra.callbacks.sweep_report.echo" in keys and "eval.arith.num_problems" in keys

    def present(key: str) -> bool:
        parent, _, leaf = key.rpartition(".")
        node = OmegaConf.select(cfg, parent, throw_on_resolution_failure=False)
        return node is not None and leaf in node  # the node's keys, its values left unresolved

    missing = [k for k in keys if not present(k)]
    assert missing == [], f"documented but not in the composed config: {missing}"


def test_every_callback_setting_is_documented_and_can_be_set():
    import inspect

    from hydra.utils import get_class

    cfg = composed(["hydra.callbacks.sweep_report.echo=true"])
    assert cfg.hydra.callbacks.sweep_report.echo is True
    keys = []
    for name, node in cfg.hydra.callbacks.items():
        params = [p.name for p in inspect.signature(get_class(node._target_).__init__).parameters.values()
                  if p.name != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
        keys += [f"hydra.callbacks.{name}.{p}" for p in params]
        assert all(p in node for p in params), f"{name}: a setting of its class is not in conf/ (so cannot be set)"
    assert "hydra.callbacks.sweep_report.echo" in keys
    assert [k for k in keys if not documented(k)] == []
