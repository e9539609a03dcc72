"""Paired comparisons: exact differences on hand-made records, interval coverage on simulated
data, and the report writing paired.csv for a hand-made sweep with per-example records."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest

from mathneuro.cli import report as report_cli
from mathneuro.report import paired
from mathneuro.report.paired import paired_bootstrap, paired_differences
from mathneuro.report.point_records import read_records
from tests.records_sweeps import GSM, RACE, lose, records_sweep, write_point


# ------------------------------------------------------------------------------------ statistics
def test_known_difference_and_deterministic_interval() -> None:
    base = {i: float(i % 2) for i in range(100)}  # 50 correct
    edited = dict(base)
    for i in range(1, 21, 2):  # 10 correct answers lost
        edited[i] = 0.0
    diffs, docs = paired_differences([edited], [base])
    assert docs == list(range(100))
    mean, low, high = paired_bootstrap(diffs, resamples=4000, seed=3)
    assert mean == pytest.approx(-0.1)
    assert low < -0.1 < high and high < 0  # ten losses, no gains: the interval excludes 0
    assert (mean, low, high) == paired_bootstrap(diffs, resamples=4000, seed=3)  # seeded
    assert paired_bootstrap(np.zeros(30))[1:] == (0.0, 0.0)  # no difference on any example


def test_seeds_average_and_doc_ids_intersect() -> None:
    ref0 = {i: 1.0 for i in range(10)}
    ref1 = {i: 1.0 for i in range(2, 12)}
    ed0 = {i: (0.0 if i < 3 else 1.0) for i in range(10)}   # docs 0,1,2 lost
    ed1 = {i: (0.0 if i == 5 else 1.0) for i in range(12)}  # doc 5 lost
    diffs, docs = paired_differences([ed0, ed1], [ref0, ref1])
    assert docs == list(range(2, 10))  # common to both seeds and both sides
    assert diffs.shape == (2, 8)
    mean, _, _ = paired_bootstrap(diffs)
    assert mean == pytest.approx(((-1 / 8) + (-1 / 8)) / 2)


def test_group_records_pair_by_subtask_and_doc_id(tmp_path: Path) -> None:
    """A group's pooled records (doc_ids repeat across subtasks) pair example by example."""
    from mathneuro.evaluation.samples import pooled_records, write_records

    base = {"mmlu_a": [{"doc_id": i, "acc": 1.0} for i in range(3)],
            "mmlu_b": [{"doc_id": i, "acc": float(i != 0)} for i in range(2)]}
    edited = {"mmlu_a": [{"doc_id": i, "acc": float(i != 1)} for i in range(3)],  # a/1 lost
              "mmlu_b": [{"doc_id": i, "acc": 1.0} for i in range(2)]}            # b/0 gained
    ref = read_records(write_records(tmp_path / "base", "mmlu", pooled_records(base)))
    mine = read_records(write_records(tmp_path / "edit", "mmlu", pooled_records(edited)))
    assert set(ref) == {("mmlu_a", 0), ("mmlu_a", 1), ("mmlu_a", 2), ("mmlu_b", 0), ("mmlu_b", 1)}
    diffs, docs = paired_differences([{d: v["acc"] for d, v in mine.items()}], [{d: v["acc"] for d, v in ref.items()}])
    assert len(docs) == 5
    assert sorted(diffs[0].tolist()) == [-1.0, 0.0, 0.0, 0.0, 1.0]


def test_bad_input_is_refused() -> None:
    with pytest.raises(ValueError, match="n > 0"):
        paired_bootstrap(np.zeros((2, 0)))
    with pytest.raises(ValueError, match="confidence"):
        paired_bootstrap([1.0, 0.0], confidence=1.5)


def test_interval_covers_the_truth_at_the_stated_rate() -> None:
    """200 simulated evaluations of 200 examples: per example the edit loses (-1), keeps (0) or
    gains (+1) with probabilities 0.2 / 0.7 / 0.1, so the true mean difference is -0.1."""
    rng = np.random.default_rng(1234)
    truth, hits = -0.1, 0
    for k in range(200):
        d = rng.choice([-1.0, 0.0, 1.0], p=[0.2, 0.7, 0.1], size=200)
        _, low, high = paired_bootstrap(d, resamples=2000, seed=k)
        hits += low <= truth <= high
    assert 0.9 <= hits / 200 <= 0.99


def test_multi_seed_interval_covers_the_truth() -> None:
    """Three seeds on the same 150 examples: an example effect shared by the seeds plus per-seed
    noise. Resampling examples jointly across seeds keeps the coverage near 95 %."""
    rng = np.random.default_rng(99)
    truth, hits = 0.05, 0
    for k in range(200):
        shared = rng.normal(truth, 0.5, size=150)
        d = shared[None, :] + rng.normal(0.0, 0.3, size=(3, 150))
        _, low, high = paired_bootstrap(d, resamples=2000, seed=k)
        hits += low <= truth <= high
    assert 0.9 <= hits / 200 <= 0.99


# ---------------------------------------------------------------------------------- end to end
@pytest.fixture
def sweep(tmp_path: Path) -> Path:
    return records_sweep(
        tmp_path / "sweep",
        ("0", "mathneuro", 0, {"gsm": lose(GSM, 10), "race": lose(RACE, 2)}),
        ("1", "mathneuro", 1, {"gsm": lose(GSM, 8), "race": lose(RACE, 4)}),
        ("2", "random", 0, {"gsm": lose(GSM, 1), "race": lose(RACE, 1)}),
        # seed 1's random point logged only RACE docs 0-29
        ("3", "random", 1, {"gsm": lose(GSM, 2), "race": lose(RACE, 1), "docs": range(30)}),
        ("4", "wanda", 0, None),  # no per-example records
        ("5", "mathneuro", 0, {"gsm": lose(GSM, 5), "race": RACE}, {"filt": "mmlu"}),  # no random twin
    )


def test_report_writes_paired_csv(sweep: Path, capsys) -> None:
    assert report_cli.main([str(sweep)]) == 0
    out = capsys.readouterr().out
    path = sweep / "report" / "paired.csv"
    assert f"wrote {path}" in out
    with path.open() as f:
        reader = csv.DictReader(f)
        assert list(reader.fieldnames)[: len(paired.COLUMNS)] == list(paired.COLUMNS)
        rows = list(reader)
    got = {(r["method"], r["filter"], r["reference"], r["task"], r["metric"]): r for r in rows}
    em = "exact_match,strict-match"
    assert set(got) == {
        ("mathneuro", "race", "baseline", "gsm8k", em), ("mathneuro", "race", "baseline", "race", "acc"),
        ("mathneuro", "race", "random", "gsm8k", em), ("mathneuro", "race", "random", "race", "acc"),
        ("random", "race", "baseline", "gsm8k", em), ("random", "race", "baseline", "race", "acc"),
        ("mathneuro", "mmlu", "baseline", "gsm8k", em), ("mathneuro", "mmlu", "baseline", "race", "acc"),
    }

    def check(key, diff, n, seeds):
        row = got[key]
        assert float(row["diff"]) == pytest.approx(diff)
        assert int(row["n_examples"]) == n and int(row["seeds"]) == seeds
        assert float(row["ci_low"]) <= float(row["diff"]) <= float(row["ci_high"])
        assert row["top_k"] == "0.05" and row["scalar"] == "0.0"

    check(("mathneuro", "race", "baseline", "gsm8k", em), (-10 / 30 - 8 / 30) / 2, 30, 2)
    check(("mathneuro", "race", "baseline", "race", "acc"), (-2 / 40 - 4 / 40) / 2, 40, 2)
    check(("mathneuro", "race", "random", "gsm8k", em), ((-10 + 1) / 30 + (-8 + 2) / 30) / 2, 30, 2)
    # RACE against random: only docs 0-29 exist for seed 1's random point; the first correct
    # answers (docs 1, 3, 5, 7) are the lost ones, all inside 0-29
    check(("mathneuro", "race", "random", "race", "acc"), ((-2 + 1) / 30 + (-4 + 1) / 30) / 2, 30, 2)
    check(("random", "race", "baseline", "gsm8k", em), (-1 / 30 - 2 / 30) / 2, 30, 2)
    check(("mathneuro", "mmlu", "baseline", "gsm8k", em), -5 / 30, 30, 1)
    # an interval on 10 lost of 30 with nothing gained lies below 0
    assert float(got[("mathneuro", "race", "baseline", "gsm8k", em)]["ci_high"]) < 0

    summary = (sweep / "report" / "summary.md").read_text()
    assert "Paired differences" in summary
    skip = [line for line in summary.splitlines() if line.startswith("- [no per-example records] 4:")]
    assert len(skip) == 1 and "no per-example records" in skip[0]
    assert "filter=mmlu" in summary and "not compared with random" in summary


def test_python_api_matches_the_report(sweep: Path) -> None:
    rows = paired.paired_comparisons(sweep, resamples=500)
    again = paired.paired_comparisons([sweep / str(i) for i in range(6)], resamples=500)
    assert len(rows) == 8
    key = lambda r: (r["method"], r["filter"], r["reference"], r["task"], r["metric"])  # noqa: E731
    assert sorted(map(key, rows)) == sorted(map(key, again))


def test_no_records_anywhere_is_one_line(tmp_path: Path) -> None:
    for i in range(3):
        write_point(tmp_path, str(i), "mathneuro", i, None)
    rep = paired.paired_report(tmp_path)
    assert rep.rows == [] and len(rep.notes) == 1 and "eval.log_samples=true" in rep.notes[0]
    from mathneuro.report import write_report

    out = write_report(tmp_path)
    assert out["paired_csv"] is None and not (tmp_path / "report" / "paired.csv").exists()


@pytest.mark.integration  # wandb.init starts its service process
def test_multirun_callback_writes_paired_csv_and_wandb_gets_the_table(sweep: Path) -> None:
    from omegaconf import OmegaConf

    from mathneuro.cli.callbacks import SweepReport
    from mathneuro.report import log_report_to_wandb, write_report

    SweepReport().on_multirun_end(OmegaConf.create({"hydra": {"sweep": {"dir": str(sweep)}},
                                                    "logger": {"name": "none"}}))
    assert (sweep / "report" / "paired.csv").is_file()

    import wandb

    from tests.wandb_records import read_run

    run = wandb.init(project="mathneuro-test", mode="offline", dir=str(sweep.parent), job_type="report",
                     settings=wandb.Settings(silent=True))
    log_report_to_wandb(write_report(sweep), run)
    run.finish()
    (folder,) = (sweep.parent / "wandb").glob("offline-run-*")
    logged = read_run(folder)
    table = logged.table("report/paired")
    assert table["columns"][: len(paired.COLUMNS)] == list(paired.COLUMNS) and len(table["data"]) == 8
    rows = [h for h in logged.history if "K" in h]  # one row per compared point, its paired differences as numbers
    assert sorted((h["method"], h["filter"]) for h in rows) == [("mathneuro", "mmlu"), ("mathneuro", "race"),
                                                                ("random", "race")]
    for cells in table["data"]:
        r = dict(zip(table["columns"], cells, strict=True))
        (row,) = [h for h in rows if (h["method"], h["filter"]) == (r["method"], r["filter"])]
        # filter varies
        key = f"paired/{r['method']}/filter={r['filter']}/vs_{r['reference']}/{r['task']}/{r['metric']}"
        assert row[key] == pytest.approx(r["diff"])  # with the interval that decides the verdict
        assert row[key + "/ci_low"] == pytest.approx(r["ci95_low"])
        assert row[key + "/ci_high"] == pytest.approx(r["ci95_high"])


def test_lape_is_paired_with_random_neurons_as_well_as_random(tmp_path: Path) -> None:
    root = records_sweep(
        tmp_path / "sweep",
        ("0", "lape", 0, {"gsm": lose(GSM, 12), "race": lose(RACE, 3)}),
        ("1", "random", 0, {"gsm": lose(GSM, 1), "race": RACE}),
        ("2", "random_neurons", 0, {"gsm": lose(GSM, 4), "race": lose(RACE, 2)}),
        ("3", "mathneuro", 0, {"gsm": lose(GSM, 9), "race": RACE}),
    )
    rows = paired.paired_comparisons(root, resamples=300)
    got = {(r["method"], r["reference"], r["task"]): r["diff"] for r in rows}
    assert got[("lape", "random_neurons", "gsm8k")] == pytest.approx((-12 + 4) / 30)
    assert got[("lape", "random_neurons", "race")] == pytest.approx((-3 + 2) / 40)
    assert got[("lape", "random", "gsm8k")] == pytest.approx((-12 + 1) / 30)
    assert got[("random_neurons", "baseline", "gsm8k")] == pytest.approx(-4 / 30)
    # random_neurons is LAPE's reference only; a reference itself is compared with the baseline only
    assert {k[1] for k in got if k[0] == "mathneuro"} == {"baseline", "random"}
    assert {k[1] for k in got if k[0] in ("random", "random_neurons")} == {"baseline"}


def test_wanda_is_paired_with_random_of_its_own_size(tmp_path: Path) -> None:
    """``random`` with ``method.reference=wanda`` (point.reference) is Wanda's reference only, apart
    from the MathNeuro-sized ``random`` in every row and table."""
    root = records_sweep(
        tmp_path / "sweep",
        ("0", "wanda", 0, {"gsm": lose(GSM, 15), "race": lose(RACE, 10)}),
        ("1", "random", 0, {"gsm": lose(GSM, 1), "race": RACE}),
        ("2", "random", 0, {"gsm": lose(GSM, 11), "race": lose(RACE, 4)}, {"reference": "wanda"}),
        ("3", "mathneuro", 0, {"gsm": lose(GSM, 9), "race": RACE}),
    )
    rows = paired.paired_comparisons(root, resamples=300)
    got = {(r["method"], r["reference"], r["task"]): r["diff"] for r in rows}
    assert got[("wanda", "random(wanda)", "gsm8k")] == pytest.approx((-15 + 11) / 30)
    assert got[("wanda", "random(wanda)", "race")] == pytest.approx((-10 + 4) / 40)
    assert got[("wanda", "random", "gsm8k")] == pytest.approx((-15 + 1) / 30)
    assert got[("random(wanda)", "baseline", "gsm8k")] == pytest.approx(-11 / 30)
    assert got[("random", "baseline", "gsm8k")] == pytest.approx(-1 / 30)
    assert {k[1] for k in got if k[0] == "mathneuro"} == {"baseline", "random"}
    assert {k[1] for k in got if k[0] in ("random", "random(wanda)")} == {"baseline"}

    from mathneuro.report import comparison_rows, load_results, tidy_rows

    complete, _ = load_results(root)
    table = comparison_rows(tidy_rows(complete), ["math/gsm8k/exact_match,strict-match"])
    assert sorted((r["method"], r.get("reference") or "") for r in table) == [
        ("mathneuro", ""), ("random", ""), ("random", "wanda"), ("wanda", "")]


def test_points_from_different_machines_are_not_paired(tmp_path: Path) -> None:
    """A point and its reference computed on different kinds of machine (bf16 rounds differently) are not
    compared: the comparison is listed as not made, 'machines differ', naming both kinds."""
    from mathneuro.report.not_made import MACHINES_DIFFER, count_text, reason_of

    root = records_sweep(
        tmp_path / "sweep",
        ("0", "mathneuro", 0, {"gsm": lose(GSM, 10), "race": lose(RACE, 2)}),
        ("1", "random", 0, {"gsm": lose(GSM, 1), "race": lose(RACE, 1)}),
    )
    xeon = {"device": "cpu", "device_name": "Intel Xeon", "cpu_flags": ["amx_bf16", "avx512_bf16"]}
    epyc = {"device": "cpu", "device_name": "AMD EPYC", "cpu_flags": ["avx2"]}
    for name, hardware in (("0", xeon), ("1", epyc)):
        path = root / name / "results.json"
        result = json.loads(path.read_text())
        result["hardware"] = hardware
        result["baseline_hardware"] = xeon  # each point's unedited model on the Xeon
        path.write_text(json.dumps(result))
    report = paired.paired_report(root, resamples=200)
    pairs = {(r["method"], r["reference"]) for r in report.rows}
    assert ("mathneuro", "baseline") in pairs  # Xeon against Xeon
    assert ("mathneuro", "random") not in pairs and ("random", "baseline") not in pairs
    refused = [n for n in report.notes if reason_of(n) == MACHINES_DIFFER]
    assert len(refused) == 4  # two tasks against random, two of random against its Xeon baseline
    assert all("Intel Xeon (amx_bf16+avx512_bf16)" in n and "AMD EPYC (avx2)" in n for n in refused)
    assert "machines differ: 4" in count_text(report.notes)


def test_points_without_recorded_hardware_are_still_paired(sweep: Path) -> None:
    rows = paired.paired_comparisons(sweep, resamples=200)
    assert {(r["method"], r["reference"]) for r in rows} >= {("mathneuro", "baseline"), ("mathneuro", "random")}
