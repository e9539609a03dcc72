"""Sweep reports on fabricated multirun trees: exact rows and aggregates, missing points, figures."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from mathneuro import report as rep
from mathneuro.cli import report as report_cli
from mathneuro.report import figures

MATH = "math/arith/exact_match"
NONMATH = "nonmath/mc/acc"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
BASE = {MATH: 0.5, NONMATH: 0.4, "math/arith/exact_match_stderr": 0.03}


def math_value(method: str, top_k: float, seed: int, scalar: float = 0.0) -> float:
    """Known metric values: mathneuro kills math as K grows, wanda less, random barely."""
    drop = {"mathneuro": 3.0, "wanda": 1.5, "random": 0.2}[method]
    return round(max(0.0, 0.5 - drop * top_k) + 0.02 * seed + 0.1 * (scalar - 1.0) * (scalar > 0), 6)


def nonmath_value(method: str, top_k: float, seed: int) -> float:
    drop = {"mathneuro": 0.2, "wanda": 1.0, "random": 0.2}[method]
    return round(0.4 - drop * top_k + 0.01 * seed, 6)


def result(point: dict, metrics: dict, *, status: str = "complete", baseline: dict | None = None) -> dict:
    n_sel = int(round(point["top_k"] * 1000))
    return {
        "status": status,
        "point": point,
        "config": {"method": {"name": point["method"]}},
        "selection": {"method": point["method"], "top_k": point["top_k"], "num_selected": n_sel,
                      "num_scored": 1000, "num_parameters": 5000, "fraction_of_model": n_sel / 5000,
                      "fraction_of_scored": n_sel / 1000,
                      "per_layer": {"0": n_sel // 2, "1": n_sel - n_sel // 2, "other": 0},
                      "per_module": {"q_proj": n_sel // 4, "down_proj": n_sel - n_sel // 4}},
        "metrics": metrics,
        "baseline_metrics": BASE if baseline is None else baseline,
        "timings": {"total": 1.0},
        "statistics_keys": ["abc"],
        "sample_ids_hash": "def",
        "versions": {"mathneuro": "0.1.0"},
        "objective": metrics.get(MATH),
    }


def point(method: str, top_k: float, seed: int, intervention: str = "prune", scalar: float = 0.0) -> dict:
    return {"model": "tiny", "task": "arith", "filter": "race", "method": method, "top_k": top_k,
            "intervention": intervention, "scalar": scalar, "seed": seed, "num_samples": 10}


def write_job(job: Path, data: dict | str | None, overrides: list[str]) -> None:
    (job / ".hydra").mkdir(parents=True)
    (job / ".hydra" / "overrides.yaml").write_text("".join(f"- {o}\n" for o in overrides))
    if isinstance(data, dict):
        (job / "results.json").write_text(json.dumps(data))
    elif isinstance(data, str):
        (job / "results.json").write_text(data)


@pytest.fixture
def sweep(tmp_path: Path) -> Path:
    """12 prune points (3 methods x 2 top-K x 2 seeds), 4 scale points, 4 missing/incomplete."""
    root = tmp_path / "multirun" / "2025-01-01" / "12-00-00"
    root.mkdir(parents=True)
    (root / "multirun.yaml").write_text("hydra: {}\n")
    job = 0
    for method in ("mathneuro", "wanda", "random"):
        for top_k in (0.01, 0.1):
            for seed in (0, 1):
                p = point(method, top_k, seed)
                metrics = {MATH: math_value(method, top_k, seed), NONMATH: nonmath_value(method, top_k, seed),
                           "math/arith/exact_match_stderr": 0.02}
                write_job(root / str(job), result(p, metrics), [f"method={method}", f"top_k={top_k}", f"seed={seed}"])
                job += 1
    for scalar in (1.1, 1.2):
        for seed in (0, 1):
            p = point("mathneuro", 0.05, seed, "scale", scalar)
            metrics = {MATH: math_value("mathneuro", 0.05, seed, scalar), NONMATH: 0.4}
            # nested override-string job dirs
            write_job(root / "scale" / f"scalar={scalar},seed={seed}", result(p, metrics), [f"scalar={scalar}"])
    write_job(root / str(job), None, ["method=lape", "seed=0"])  # crashed before writing
    write_job(root / str(job + 1), result(point("wanda", 0.15, 0), {MATH: 0.1}, status="running"), ["top_k=0.15"])
    write_job(root / str(job + 2), "{not json", ["top_k=0.5"])
    write_job(root / str(job + 3), {"status": "complete", "point": point("random", 0.15, 1)}, [])
    return root


# --------------------------------------------------------------------------------------- loading
def test_load_results_lists_missing_and_incomplete(sweep: Path) -> None:
    complete, missing = rep.load_results(sweep)
    assert len(complete) == 16
    jobs = [m["job"] for m in missing]
    assert jobs == ["12", "13", "14", "15"]
    reasons = {m["job"]: m["reason"] for m in missing}
    assert reasons["12"] == "no results.json"
    assert reasons["13"].startswith("status='running'")
    assert reasons["14"].startswith("unreadable JSON")
    assert reasons["15"] == "missing fields: metrics"
    assert missing[0]["overrides"] == ["method=lape", "seed=0"]
    assert missing[1]["point"]["top_k"] == 0.15
    # natural order: 0, 1, ..., 11 (not 0, 1, 10, 11, 2), then the nested scale jobs
    assert [c["_job"] for c in complete][:12] == [str(i) for i in range(12)]
    assert all(c["_job"].startswith("scale/scalar=") for c in complete[12:])


def test_load_results_single_run_dir_and_errors(tmp_path: Path) -> None:
    run = tmp_path / "run"
    write_job(run, result(point("wanda", 0.1, 0), {MATH: 0.3}), [])
    complete, missing = rep.load_results(run)
    assert len(complete) == 1 and complete[0]["_job"] == "." and missing == []
    with pytest.raises(FileNotFoundError):
        rep.load_results(tmp_path / "absent")


# ------------------------------------------------------------------------------------------- rows
def test_tidy_rows_exact(sweep: Path) -> None:
    complete, _ = rep.load_results(sweep)
    rows = rep.tidy_rows(complete)
    assert len(rows) == 16
    row = rows[0]  # mathneuro, top_k 0.01, seed 0
    assert (row["method"], row["top_k"], row["seed"], row["job"]) == ("mathneuro", 0.01, 0, "0")
    assert row[MATH] == 0.47 and row[f"baseline/{MATH}"] == 0.5
    assert row[f"rel_change/{MATH}"] == pytest.approx((0.47 - 0.5) / 0.5)
    assert row[f"rel_change/{NONMATH}"] == pytest.approx((0.398 - 0.4) / 0.4)
    assert row[f"diff/{MATH}"] == pytest.approx(0.47 - 0.5) and row[f"diff/{NONMATH}"] == pytest.approx(0.398 - 0.4)
    assert (row["selection/num_selected"], row["selection/fraction_of_model"], row["selection/fraction_of_scored"]) == (
        10, 0.002, 0.01)
    assert row["objective"] == 0.47
    assert (row["per_layer/0"], row["per_layer/1"], row["per_layer/other"]) == (5, 5, 0)
    assert row["per_module/down_proj"] == 8
    assert rep.metric_names(rows) == [MATH, NONMATH]
    assert f"baseline/{MATH}_stderr" in row and f"rel_change/{MATH}_stderr" not in row


def test_relative_change_skipped_when_baseline_is_zero_or_absent() -> None:
    r = result(point("wanda", 0.1, 0), {MATH: 0.2, NONMATH: 0.3, "math/x/acc": 0.1}, baseline={MATH: 0.0, NONMATH: 0.5})
    row = rep.tidy_row(r)
    assert f"rel_change/{MATH}" not in row and "rel_change/math/x/acc" not in row
    assert row[f"rel_change/{NONMATH}"] == pytest.approx(-0.4)
    assert row[f"diff/{MATH}"] == pytest.approx(0.2) and "diff/math/x/acc" not in row  # absolute needs only a before


def test_aggregate_over_repeats() -> None:
    rows = [{"method": "a", "seed": 0, "m": 0.1}, {"method": "a", "seed": 1, "m": 0.2},
            {"method": "a", "seed": 2, "m": 0.3}, {"method": "b", "seed": 0, "m": 0.5},
            {"method": "b", "seed": 1, "m": None}, {"method": "b", "seed": 2}]
    out = rep.aggregate(rows, ["method"], "m")
    assert [o["method"] for o in out] == ["a", "b"]
    a, bb = out
    assert a["mean"] == pytest.approx(0.2) and a["std"] == pytest.approx(0.1)
    assert (a["min"], a["max"], a["n"]) == (0.1, 0.3, 3)
    assert (bb["mean"], bb["std"], bb["n"]) == (0.5, 0.0, 1)


def test_aggregate_of_sweep(sweep: Path) -> None:
    rows = rep.tidy_rows(rep.load_results(sweep)[0])
    prune = [r for r in rows if r["intervention"] == "prune"]
    out = rep.aggregate(prune, ["method", "top_k"], MATH)
    assert len(out) == 6
    first = out[0]  # mathneuro @ 0.01: seeds 0.47 and 0.49
    assert (first["method"], first["top_k"], first["n"]) == ("mathneuro", 0.01, 2)
    assert first["mean"] == pytest.approx(0.48) and first["std"] == pytest.approx(0.02 / math.sqrt(2))
    comp = rep.comparison_rows(prune, [MATH, NONMATH])
    assert len(comp) == 6 and comp[0][f"{MATH}/mean"] == pytest.approx(0.48) and comp[0]["n"] == 2
    assert set(comp[0]) == {"method", "top_k", f"{MATH}/mean", f"{MATH}/std", f"{NONMATH}/mean", f"{NONMATH}/std", "n"}


def test_csv_and_markdown(tmp_path: Path, sweep: Path) -> None:
    rows = rep.tidy_rows(rep.load_results(sweep)[0])
    path = rep.write_csv(rows, tmp_path / "points.csv")
    with path.open() as handle:
        read = list(csv.DictReader(handle))
    assert len(read) == 16
    header = list(read[0])
    assert header[:9] == list(rep.POINT_FIELDS)
    assert {f"baseline/{MATH}", f"diff/{MATH}", f"rel_change/{MATH}", "per_layer/0", "per_layer/other",
            "selection/num_selected"} <= set(header)
    assert header.index("per_layer/1") < header.index("per_layer/other")
    assert float(read[0][MATH]) == 0.47
    table = rep.markdown_table(rows[:2], ["method", "top_k", MATH])
    assert table.splitlines() == [f"| method | top_k | {MATH} |", "|---|---|---|",
                                  "| mathneuro | 0.01 | 0.47 |", "| mathneuro | 0.01 | 0.49 |"]


# ---------------------------------------------------------------------------------------- figures
def assert_png(path: Path | str, min_bytes: int = 8000) -> None:
    data = Path(path).read_bytes()
    assert data[:8] == PNG_MAGIC
    assert len(data) > min_bytes


def test_plot_functions(tmp_path: Path, sweep: Path) -> None:
    complete, _ = rep.load_results(sweep)
    rows = rep.tidy_rows(complete)
    prune = [r for r in rows if r["intervention"] == "prune"]
    assert_png(rep.plot_metric_vs_topk(prune, [MATH, NONMATH], tmp_path / "topk.png"), 20000)
    assert_png(rep.plot_metric_vs_topk(prune, MATH, tmp_path / "topk1.png"))
    scale = [r for r in rows if r["intervention"] == "scale"]
    assert_png(rep.plot_metric_vs_scalar(scale, [MATH, NONMATH], tmp_path / "scalar.png"))
    assert_png(rep.plot_per_layer(complete, tmp_path / "layers_results.png"))
    assert_png(rep.plot_per_layer(prune, tmp_path / "layers_rows.png", normalize=True))
    summary = complete[0]["selection"]
    assert_png(rep.plot_per_layer({"mathneuro": summary, "wanda": complete[4]["selection"]}, tmp_path / "l.png"))
    assert_png(rep.plot_per_layer(summary, tmp_path / "one.png"))
    with pytest.raises(ValueError):
        rep.plot_metric_vs_topk(prune, "math/none/acc", tmp_path / "none.png")


def test_labels_include_filter_when_several() -> None:
    rows = [{**point("mathneuro", 0.1, 0), "filter": f, MATH: 0.1} for f in ("race", "mmlu")]
    fields = figures._label_fields(rows, exclude=["top_k"])
    assert sorted(figures._label(r, fields) for r in rows) == ["mathneuro (mmlu)", "mathneuro (race)"]
    assert figures._label(rows[0], figures._label_fields(rows[:1], exclude=["top_k"])) == "mathneuro"
    # a field only one method has (LAPE's share) labels that method's line, not the others'
    mixed = [{**point("lape", 0.1, 0), "share": "all", MATH: 0.4}, {**point("random", 0.1, 0), "share": None,
                                                                    MATH: 1.0}]
    fields = figures._label_fields(mixed, exclude=["top_k"])
    assert sorted(figures._label(r, fields) for r in mixed) == ["lape (share=all)", "random"]


def test_data_efficiency_and_heatmap_figures(tmp_path: Path) -> None:
    from mathneuro.report.overlap import data_efficiency, overlap_matrix

    name = "model.layers.0.mlp.up_proj.weight"
    gen = torch.Generator().manual_seed(0)
    base = torch.rand(8, 64, generator=gen) < 0.3
    sels = {}
    for n, flip in ((1, 0.3), (10, 0.1), (100, 0.02)):
        for seed in (0, 1):
            noise = torch.rand(8, 64, generator=gen) < flip
            sels[(n, seed)] = {name: base ^ noise}
    rows = data_efficiency(sels)
    assert [r["num_samples"] for r in rows] == [1, 10, 100]
    assert rows[0]["jaccard_mean"] < rows[1]["jaccard_mean"] < rows[2]["jaccard_mean"]
    assert_png(rep.plot_data_efficiency(rows, tmp_path / "eff.png"))
    matrix = overlap_matrix({f"n{n}s{s}": v for (n, s), v in sels.items()})
    assert_png(rep.plot_overlap_heatmap(matrix, tmp_path / "heat.png"))


# ----------------------------------------------------------------------------------------- report
def test_write_report(tmp_path: Path, sweep: Path) -> None:
    out = rep.write_report(sweep)
    report_dir = sweep / "report"
    assert Path(out["csv"]) == report_dir / "points.csv"
    assert len(out["rows"]) == 16 and len(out["missing"]) == 4
    assert out["metrics"] == [MATH, NONMATH]
    # scale points share one top-K, so only the scale-factor figure is drawn for them
    assert set(out["figures"]) == {"prune_vs_topk", "scale_vs_scalar", "per_layer"}
    for path in out["figures"].values():
        assert_png(path)
    md = Path(out["markdown"]).read_text()
    assert "## Missing or incomplete points" in md
    for job, reason in (("12", "no results.json"), ("13", "status='running'"), ("14", "unreadable JSON"),
                        ("15", "missing fields: metrics")):
        assert f"- `{job}`: {reason}" in md
    assert "overrides: `method=lape seed=0`" in md
    assert "0.48 ± 0.014" in md  # mathneuro @ top_k 0.01 over two seeds
    assert "![prune_vs_topk](prune_vs_topk.png)" in md
    # a rerun does not read its own report dir as a job; --out elsewhere works
    again = rep.write_report(sweep, tmp_path / "elsewhere", metrics=[MATH])
    assert len(again["rows"]) == 16 and again["metrics"] == [MATH]
    with pytest.raises(ValueError, match="metrics not found"):
        rep.write_report(sweep, tmp_path / "x", metrics=["math/nope/acc"])


def test_group_subtasks_stay_out_of_figures_and_comparison_but_not_out_of_the_tables(tmp_path: Path) -> None:
    """A group (MMLU: 57 subjects) reports every subtask too; the figure shows the configured tasks only."""
    subjects = [f"mmlu_s{i}" for i in range(6)]
    root = tmp_path / "sweep"
    for job, (method, top_k) in enumerate((("mathneuro", 0.01), ("mathneuro", 0.1), ("random", 0.1))):
        metrics = {MATH: math_value(method, top_k, 0), "nonmath/mmlu/acc": 0.45}
        metrics.update({f"nonmath/{s}/acc": 0.4 + 0.01 * i for i, s in enumerate(subjects)})
        res = result(point(method, top_k, 0), metrics)
        res["config"]["eval"] = {"tasks": ["arith", "mmlu"]}
        write_job(root / str(job), res, [f"method={method}"])
    out = rep.write_report(root, tmp_path / "report")
    assert out["headline_metrics"] == [MATH, "nonmath/mmlu/acc"]
    assert len(out["metrics"]) == 8  # every metric is still read, tabulated and paired
    from matplotlib.image import imread

    height, width = imread(out["figures"]["prune_vs_topk"]).shape[:2]
    assert height < 600 and width < 1300  # one row of two panels, not three rows of three
    md = Path(out["markdown"]).read_text()
    comparison = md.split("## Comparison")[1].split("##")[0]
    assert "nonmath/mmlu/acc" in comparison and "mmlu_s0" not in comparison
    assert "6 subtask metric(s)" in md and "`nonmath/mmlu_s0/acc`" in md
    assert "mmlu_s5" in md.split("## All points")[1]
    with open(out["csv"]) as f:
        assert "nonmath/mmlu_s3/acc" in next(csv.reader(f))
    named = rep.write_report(root, tmp_path / "named", metrics=[MATH, "nonmath/mmlu_s1/acc"])
    assert named["headline_metrics"] == [MATH, "nonmath/mmlu_s1/acc"]  # asked for by name: plotted
    # without configured tasks (older results), every metric is plotted as before
    for job in range(3):
        res = json.loads((root / str(job) / "results.json").read_text())
        del res["config"]["eval"]
        (root / str(job) / "results.json").write_text(json.dumps(res))
    assert len(rep.write_report(root, tmp_path / "old")["headline_metrics"]) == 8


def test_write_report_without_complete_points(tmp_path: Path) -> None:
    write_job(tmp_path / "s" / "0", None, [])
    with pytest.raises(ValueError, match="no complete results.json"):
        rep.write_report(tmp_path / "s")


# --------------------------------------------------------------------------------------------- W&B
class RecordingRun:
    """Stands in for a W&B run: records what is logged."""

    def __init__(self, fail: bool = False):
        self.logged: list[dict] = []
        self.summary: dict = {}
        self.fail = fail

    def log(self, payload: dict) -> None:
        if self.fail:
            raise RuntimeError("network down")
        self.logged.append(payload)


def test_log_report_to_wandb_payload(sweep: Path) -> None:
    import wandb

    report = rep.write_report(sweep)
    run = RecordingRun()
    rep.log_report_to_wandb(report, run)
    (payload,) = run.logged
    assert isinstance(payload["report/prune_vs_topk"], wandb.Image)
    table = payload["report/points"]
    assert isinstance(table, wandb.Table)
    assert table.columns[:5] == ["method", "filter", "top_k", "scalar", "seed"]
    assert {MATH, NONMATH, f"baseline/{MATH}", f"diff/{MATH}", f"rel_change/{MATH}"} <= set(table.columns)
    assert len(table.data) == 16
    assert isinstance(payload["report/comparison"], wandb.Table)
    assert run.summary == {"report/complete_points": 16, "report/missing_points": 4,
                           "report/comparisons_not_made": len(report["paired_notes"])}
    with pytest.warns(UserWarning, match="W&B logging"):
        rep.log_report_to_wandb(report, RecordingRun(fail=True))
    rep.log_report_to_wandb(report, None)


def test_log_report_to_real_offline_run(tmp_path: Path, sweep: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import wandb

    monkeypatch.setenv("WANDB_SILENT", "true")
    report = rep.write_report(sweep)
    run = wandb.init(project="mathneuro-test", mode="offline", dir=str(tmp_path), job_type="report")
    try:
        rep.log_report_to_wandb(report, run)
        assert "report/points" in run.summary.keys()
    finally:
        run.finish()


# --------------------------------------------------------------------------------------------- CLI
def test_report_cli(tmp_path: Path, sweep: Path, capsys: pytest.CaptureFixture) -> None:
    assert report_cli.main([str(sweep), "--out", str(tmp_path / "r"), "--metric", MATH]) == 0
    printed = capsys.readouterr().out
    assert "16 complete point(s), 4 missing or incomplete" in printed
    assert "missing: 12: no results.json" in printed
    assert (tmp_path / "r" / "points.csv").is_file() and (tmp_path / "r" / "prune_vs_topk.png").is_file()
    assert report_cli.main([str(tmp_path / "absent")]) == 2
    assert "no such directory" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    assert report_cli.main([str(tmp_path / "empty")]) == 2
    assert "no complete results.json" in capsys.readouterr().err
    assert report_cli.main([str(sweep), "--out", str(tmp_path / "r2"), "--metric", "math/x/y"]) == 2


def test_overlap_cli(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    q0 = "model.layers.0.self_attn.q_proj.weight"
    d1 = "model.layers.1.mlp.down_proj.weight"
    a = {q0: torch.tensor([[1, 0, 1], [0, 1, 0]], dtype=torch.uint8),
         d1: torch.tensor([[1, 1], [0, 0]], dtype=torch.uint8)}
    b = {q0: torch.tensor([[1, 1, 0], [0, 1, 0]], dtype=torch.bool),
         d1: torch.tensor([[0, 1], [1, 0]], dtype=torch.bool),
         "neurons::model.layers.1.mlp.act_fn": torch.tensor([1, 2])}
    save_file(a, str(tmp_path / "seed0.safetensors"))
    save_file(b, str(tmp_path / "seed1.safetensors"), metadata={"method": "mathneuro"})
    out_json = tmp_path / "o.json"
    args = [str(tmp_path / "seed0.safetensors"), str(tmp_path / "seed1.safetensors"), "--json", str(out_json),
            "--png", str(tmp_path / "heat.png")]
    assert report_cli.overlap_main(args) == 0
    printed = capsys.readouterr().out
    assert "seed1: 7 selected (5 weights = 50.0000% of 10 mask entries, 2 neurons)" in printed
    assert "seed0" in printed and "0.3333" in printed  # |A∩B| = 2 + 1 = 3, |A∪B| = 5 + 7 - 3 = 9
    data = json.loads(out_json.read_text())
    pair = data["pairs"][0]
    assert (pair["size_a"], pair["size_b"], pair["intersection"], pair["union"]) == (5, 7, 3, 9)
    assert pair["jaccard"] == 3 / 9 and pair["a_in_b"] == 3 / 5
    assert data["per_layer"] == {"seed0": {"0": 3, "1": 2}, "seed1": {"0": 3, "1": 4}}
    assert data["per_module"]["seed1"] == {"act_fn": 2, "down_proj": 2, "q_proj": 3}
    assert data["metadata"]["seed1"] == {"method": "mathneuro"}
    assert_png(tmp_path / "heat.png")
    assert report_cli.overlap_main([str(tmp_path / "missing.safetensors")]) == 2
    assert "no such file" in capsys.readouterr().err
