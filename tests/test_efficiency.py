"""Data efficiency on both sets: the runner saves the math top-K set, the analysis, the report
and the figure give the overlap of two draws for M and for the top-K sets."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from mathneuro.methods import topk_count
from mathneuro.methods.selection import Selection
from mathneuro.pipeline.runner import run_point
from mathneuro.report import write_report
from mathneuro.report.efficiency import MATH_TOPK_FILE, efficiency_table
from mathneuro.report.overlap import data_efficiency
from tests.test_runner import base_overrides, compose_cfg

NAME = "model.layers.0.mlp.up_proj.weight"


def mask(*idx: int) -> dict[str, torch.Tensor]:
    m = torch.zeros(1, 10, dtype=torch.bool)
    m[0, list(idx)] = True
    return {NAME: m}


def test_run_point_saves_the_math_topk_set(tiny_dir, tmp_path):  # noqa: F811
    def run(method: str, out: Path) -> None:
        cfg = compose_cfg([*base_overrides(tiny_dir, tmp_path / "cache"), f"method={method}", "eval=none",
                           "logger=none", "save_selection=true", "top_k=0.2"])
        run_point(OmegaConf.to_object(cfg), out)

    run("mathneuro", tmp_path / "m")
    run("wanda", tmp_path / "w")
    m = Selection.load(tmp_path / "m" / "selection.safetensors")
    top = Selection.load(tmp_path / "m" / MATH_TOPK_FILE)
    wanda = Selection.load(tmp_path / "w" / "selection.safetensors")
    assert not (tmp_path / "w" / MATH_TOPK_FILE).exists()  # only mathneuro has a set before the filter
    assert set(top.masks) == set(m.masks) and top.method == "mathneuro_topk"
    for name, t in top.masks.items():
        assert int(t.sum()) == topk_count(t.numel(), 0.2)  # the full top-K of every matrix
        assert not (m.masks[name] & ~t).any()  # M lies inside it
        assert torch.equal(t, wanda.masks[name])  # and it is exactly the math score's top-K
    assert top.num_selected() > m.num_selected()  # the filter removed something


def test_data_efficiency_reports_both_sets() -> None:
    m_sets = {(1, 0): mask(0, 1), (1, 1): mask(2, 5), (10, 0): mask(0, 1, 2, 3), (10, 1): mask(0, 1, 2, 4)}
    top_sets = {(1, 0): mask(0, 1, 2, 6), (1, 1): mask(0, 1, 2, 5), (10, 0): mask(0, 1, 2, 3, 6),
                (10, 1): mask(0, 1, 2, 3, 5)}
    rows = data_efficiency(m_sets, topk_selections=top_sets)
    one, ten = rows
    assert one["jaccard_mean"] == 0.0 and one["a_in_b_mean"] == 0.0  # M: nothing shared at N=1
    assert one["topk_jaccard_mean"] == pytest.approx(3 / 5)  # top-K: 3 of 5 shared
    assert one["topk_a_in_b_mean"] == pytest.approx(3 / 4)
    assert ten["topk_jaccard_mean"] == pytest.approx(4 / 6) and ten["jaccard_mean"] == pytest.approx(0.6)
    assert one["topk_ref_num_samples"] == 10
    assert "topk_jaccard_mean" not in data_efficiency(m_sets)[0]  # M only without top-K sets


def write_point(root: Path, name: str, method: str, n: int, seed: int, sets: dict[str, dict]) -> None:
    job = root / name
    job.mkdir(parents=True)
    point = {"model": "tiny", "task": "gsm8k", "filter": "race", "method": method, "top_k": 0.15,
             "intervention": "prune", "scalar": 0.0, "seed": seed, "num_samples": n}
    (job / "results.json").write_text(json.dumps({"status": "complete", "point": point, "metrics": {},
                                                  "selection": {"num_selected": 1}}))
    for file, masks in sets.items():
        Selection(masks, method=method).save(job / file)


def test_report_writes_data_efficiency_of_both_sets(tmp_path: Path, capsys) -> None:
    root = tmp_path / "sweep"
    write_point(root, "a", "mathneuro", 1, 0, {"selection.safetensors": mask(0, 1), MATH_TOPK_FILE: mask(0, 1, 2, 6)})
    write_point(root, "b", "mathneuro", 1, 1, {"selection.safetensors": mask(2, 5), MATH_TOPK_FILE: mask(0, 1, 2, 5)})
    write_point(root, "c", "mathneuro", 10, 0, {"selection.safetensors": mask(0, 1, 2, 3)})
    write_point(root, "d", "mathneuro", 10, 1, {"selection.safetensors": mask(0, 1, 2, 4)})
    # an older sweep: the N=10 top-K sets come from wanda points of the same N and seed
    write_point(root, "e", "wanda", 10, 0, {"selection.safetensors": mask(0, 1, 2, 3, 6)})
    write_point(root, "f", "wanda", 10, 1, {"selection.safetensors": mask(0, 1, 2, 3, 5)})
    report = write_report(root)
    with open(report["data_efficiency_csv"]) as f:
        every = list(csv.DictReader(f))
    # every method with saved selections is a study of its own; Wanda's declares no second set
    assert [(r["method"], r["num_samples"]) for r in every] == [("mathneuro", "1"), ("mathneuro", "10"),
                                                                ("wanda", "10")]
    assert float(every[2]["jaccard_mean"]) == pytest.approx(4 / 6) and every[2]["topk_jaccard_mean"] == ""
    rows = every[:2]
    assert float(rows[0]["jaccard_mean"]) == 0.0 and float(rows[0]["topk_jaccard_mean"]) == pytest.approx(0.6)
    assert float(rows[1]["topk_jaccard_mean"]) == pytest.approx(4 / 6)
    assert float(rows[0]["topk_ref_in_n_mean"]) == pytest.approx((4 / 5 + 3 / 5 + 3 / 5 + 4 / 5) / 4)
    png = Path(next(path for name, path in report["figures"].items() if "mathneuro" in name))
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    summary = Path(report["markdown"]).read_text()
    assert "Data efficiency" in summary and "Jaccard top-K" in summary and "data_efficiency_" in summary


def test_topk_columns_stay_empty_without_topk_sets(tmp_path: Path) -> None:
    root = tmp_path / "sweep"
    for i, (n, seed) in enumerate(((5, 0), (5, 1))):
        write_point(root, str(i), "mathneuro", n, seed, {"selection.safetensors": mask(0, seed + 1)})
    from mathneuro.report import load_results

    rows = efficiency_table(load_results(root)[0])
    assert len(rows) == 1 and rows[0]["jaccard_mean"] == pytest.approx(1 / 3)
    assert rows[0].get("topk_jaccard_mean") is None
