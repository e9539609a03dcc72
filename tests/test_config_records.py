"""The config records what ran (issue 39): ``filters=[...]`` leaves no ``filter`` in the composed config,
the tags or results.json; ``--help`` lists only the chosen method's keys; a method's declared unit is
checked against its selection; a run refused before it starts leaves no folder behind."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from mathneuro.cli.run import config_dir
from mathneuro.methods import MethodConfig, Selection, register_method
from mathneuro.methods.registry import resolve_method
from mathneuro.pipeline.config import ConfigError, help_config, register_configs
from mathneuro.pipeline.runner import run_point
from mathneuro.results.wandb_layout import run_tags

from .test_runner import base_overrides, cli, compose_cfg


def _with_hydra(overrides: list[str]):
    register_configs()
    with initialize_config_dir(config_dir=config_dir(), version_base="1.3"):
        return compose(config_name="config", overrides=overrides, return_hydra_config=True)


def test_filters_leave_no_filter_in_the_config_the_tags_or_results(tiny_dir: Path, tmp_path: Path) -> None:
    full = _with_hydra(["filters=[embedded_nonmath]"])
    assert full.filter is None and list(full.filters) == ["embedded_nonmath"]
    cfg = compose_cfg([*base_overrides(tiny_dir, tmp_path / "cache"), "filters=[embedded_nonmath]", "eval=none",
                       "logger=none", "num_samples=4", "max_length=32"])
    resolved = OmegaConf.to_container(cfg, resolve=True)
    result = run_point(OmegaConf.to_object(cfg), tmp_path / "run", resolved_config=resolved)
    written = json.loads((tmp_path / "run" / "results.json").read_text())
    assert "filter" not in written["config"] and "filter" not in result["config"]
    assert written["config"]["filters"]["embedded_nonmath"]["path"] == "embedded://nonmath_demo"
    assert written["point"]["filter"] == "embedded_nonmath"  # the point's field names the sets that ran
    assert [t for t in run_tags(written["point"]) if t.startswith("filter")] == ["filter=embedded_nonmath"]

    alone = _with_hydra([])
    assert alone.filter.name == "embedded_nonmath"


@pytest.mark.parametrize("method", ["mathneuro", "lape", "wanda", "random"])
def test_help_lists_only_the_chosen_methods_settings(method: str) -> None:
    text = help_config(_root_=_with_hydra([f"method={method}"]))
    listed = OmegaConf.create(text.replace("$$", "$")).method
    spec, _ = resolve_method(method)
    assert set(listed) - {"name"} == set(spec.settings()) and listed.name == method
    assert "hydra:" not in text


def test_help_drops_filter_where_filters_replace_it() -> None:
    listed = OmegaConf.create(help_config(_root_=_with_hydra(["filters=[embedded_nonmath]"])).replace("$$", "$"))
    assert "filter" not in listed and "embedded_nonmath" in listed.filters


@dataclass
class _NeuronsConfig(MethodConfig):
    name: str = "t39_unitless_neurons"


def test_a_method_whose_selection_is_not_of_its_declared_unit_is_refused(tiny_dir: Path, tmp_path: Path) -> None:
    @register_method("t39_unitless_neurons", needs=("activation_counts",), config=_NeuronsConfig, replace=True)
    def unitless(inputs, cfg):  # registered without unit="neurons": declared weight-level
        task = inputs.task["activation_counts"]
        return Selection(neurons={m: torch.tensor([0, 1]) for m in task.modules()}, method="t39_unitless_neurons")

    cfg = compose_cfg([*base_overrides(tiny_dir, tmp_path / "cache"), "method=mathneuro",
                       "method.name=t39_unitless_neurons", "eval=none", "logger=none", "num_samples=4",
                       "max_length=32"])
    with pytest.raises(ConfigError) as info:
        run_point(OmegaConf.to_object(cfg), tmp_path / "run")
    line = str(info.value)
    assert "\n" not in line and line.startswith("method 't39_unitless_neurons': declares unit='weights'")
    assert "returned neurons" in line and "unit='neurons'" in line
    assert not (tmp_path / "run" / "results.json").exists()


@pytest.mark.e2e
@pytest.mark.integration
def test_a_run_refused_before_it_starts_leaves_nothing_behind(tiny_dir: Path, tmp_path: Path) -> None:
    common = [*base_overrides(tiny_dir, tmp_path / "cache"), "eval=none", "logger=none"]
    res = cli([*common, "top_k=5"], cwd=tmp_path, timeout=120)  # Hydra's default run dir: outputs/runs/<date>/<time>
    assert res.returncode == 2 and "top_k" in res.stderr
    res = cli(["-m", *common, "top_k=5,7"], cwd=tmp_path, timeout=120)  # and a sweep's first point
    assert res.returncode == 2 and "top_k" in res.stderr
    assert not (tmp_path / "outputs").exists(), sorted(str(p) for p in (tmp_path / "outputs").rglob("*"))
    kept = tmp_path / "kept"  # a run dir with results of an earlier run is never removed
    assert cli([*common, f"hydra.run.dir={kept}", "num_samples=4"], cwd=tmp_path).returncode == 0
    assert cli([*common, f"hydra.run.dir={kept}", "top_k=5"], cwd=tmp_path, timeout=120).returncode == 2
    assert (kept / "results.json").is_file()
