"""Several filter sets in one point: MathNeuro subtracts the union of their top-K sets."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from mathneuro.data import DatasetConfig
from mathneuro.methods import Selection, mathneuro_selection
from mathneuro.models.targets import find_target_linears, weight_parameters
from mathneuro.pipeline.config import ConfigError, validate
from mathneuro.pipeline.point import Point, with_method
from mathneuro.pipeline.runner import run_point
from mathneuro.pipeline.workbench import get_workbench

from .test_runner import base_overrides, compose_cfg


def write_set(path: Path, words: list[str]) -> str:
    path.write_text("".join(json.dumps({"instruction": w, "response": f"{w} {w}."}) + "\n" for w in words))
    return str(path)


@pytest.fixture
def two_filters(tmp_path: Path) -> dict[str, DatasetConfig]:
    a = write_set(tmp_path / "prose.jsonl", ["The river runs to the sea", "Birds sing at dawn", "Rain on the roof"])
    b = write_set(tmp_path / "quiz.jsonl", ["Which planet is largest?", "Who wrote Hamlet?", "Name a primary colour"])
    return {"prose": DatasetConfig(name="prose", path=a, template="{instruction}"),
            "quiz": DatasetConfig(name="quiz", path=b, template="{response}")}


def with_filters(overrides: list[str], filters: dict[str, DatasetConfig]):
    cfg = OmegaConf.to_object(compose_cfg(overrides))
    cfg.filters = dict(filters)
    return cfg


def test_two_filter_sets_subtract_the_union_and_are_reported_apart(tiny_dir, tmp_path, two_filters):
    base = [*base_overrides(tiny_dir, tmp_path / "cache"), "top_k=0.2", "eval=none", "logger=none",
            "save_selection=true"]
    cfg = with_filters(base, two_filters)
    both = run_point(cfg, tmp_path / "both")
    assert both["point"]["filter"] == "prose+quiz"
    assert len(both["sample_ids_hash"]["filter"].split("+")) == 2

    # the selection is the task's top-K minus the union of both filter sets' top-K, recomputed here
    plugins = validate(cfg)
    bench = get_workbench(cfg)
    point = Point(with_method(cfg, plugins.method_cfg), plugins, tmp_path / "x", bench=bench)
    stats = {s.name: bench.statistics(s, ("linear_inputs",), targets=point.targets, max_length=cfg.max_length,
                                      batch_size=cfg.batch_size, progress=False)[0]["linear_inputs"]
             for s in [point.task, *point.filters]}
    weights = weight_parameters(find_target_linears(bench.model))
    expected = mathneuro_selection(weights, stats[cfg.task.name], [stats["prose"], stats["quiz"]], 0.2)
    saved = Selection.load(tmp_path / "both" / "selection.safetensors")
    for name, mask in expected.masks.items():
        assert torch.equal(saved.masks[name], mask), name
    one = mathneuro_selection(weights, stats[cfg.task.name], [stats["prose"]], 0.2)
    assert expected.num_selected() < one.num_selected()  # the second set removes more

    # one filter set alone: the same draw (its statistics come from the cache), another point
    alone = run_point(with_filters(base, {"prose": two_filters["prose"]}), tmp_path / "alone")
    assert alone["point"]["filter"] == "prose"
    assert alone["selection"]["num_selected"] == one.num_selected()
    assert {s["source"] for s in alone["statistics"]} == {"memory"}


def test_filter_and_filters_together_are_refused(tiny_dir, tmp_path, two_filters):
    cfg = with_filters([*base_overrides(tiny_dir, tmp_path / "cache"), "eval=none", "logger=none"], two_filters)
    with pytest.raises(ConfigError, match=r"^filter: .*filters"):
        run_point(cfg, tmp_path / "out", overrides=["filter=embedded_nonmath", "filters=[race,mmlu]"])
