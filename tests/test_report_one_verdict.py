"""One verdict per comparison in every output, a point's identity beyond its point fields, and the comparisons
not made counted where a sweep ends (issue 51)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from mathneuro.report import write_report
from mathneuro.report.console import console_report, points_text
from mathneuro.report.identity import point_identity, split_keys
from mathneuro.report.inference import NO_DIFFERENCE, row_verdict

BASE = [1.0] * 30 + [0.0] * 10  # the unedited model: 30 of 40 right


def lose(n: int) -> list[float]:
    return [0.0 if i < n else v for i, v in enumerate(BASE)]


def write_records(folder: Path, values: list[float], prompt: str = "") -> None:
    folder.mkdir(parents=True, exist_ok=True)
    lines = [{"doc_id": i, "acc": v, **({"prompt_hash": f"{prompt}{i}"} if prompt else {})}
             for i, v in enumerate(values)]
    (folder / "race.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))


def write_point(root: Path, name: str, values: list[float], *, method: str = "mathneuro", seed: int = 0,
                template: str = "Q: {q}\nA:", project: str = "p", prompt: str = "",
                selection: dict | None = None) -> None:
    job = root / name
    (job / ".hydra").mkdir(parents=True)
    write_records(job / "samples", values, prompt)
    config = {"seed": seed, "top_k": 0.05, "task": {"name": "gsm8k", "template": template},
              "method": {"name": method}, "logger": {"project": project}, "progress": False}
    result = {"status": "complete", "config": config,
              "point": {"model": "tiny", "task": "gsm8k", "filter": "race", "method": method, "top_k": 0.05,
                        "intervention": "prune", "scalar": 0.0, "seed": seed, "num_samples": 10},
              "metrics": {"nonmath/race/acc": sum(values) / len(values)},
              "baseline_metrics": {"nonmath/race/acc": sum(BASE) / len(BASE)},
              "selection": selection or {"num_selected": 422700, "num_scored": 8454000, "fraction_of_model": 0.003},
              "samples": {"dir": "samples", "baseline_dir": "../baseline_samples", "tasks": {"race": "nonmath"}}}
    (job / "results.json").write_text(json.dumps(result))


def test_examples_only_and_draws_plus_examples_disagree_and_every_output_gives_the_draws_verdict(tmp_path):
    """4 of 40 lost, none gained: the examples-only interval excludes 0, the draws + examples one (Newcombe's
    hull for 0/1 metrics) does not. The console, summary.md, paired.csv and the W&B payload all say so."""
    wandb = pytest.importorskip("wandb")
    from mathneuro.report.wandb_log import paired_history, report_payload

    sweep = tmp_path / "sweep"
    write_records(sweep / "baseline_samples", BASE)
    write_point(sweep, "0", lose(4))
    report = write_report(sweep)
    (row,) = report["paired"]
    assert row["ci_high"] < 0 < row["ci95_high"]  # the two intervals disagree
    assert row_verdict(row) == row["difference"] == NO_DIFFERENCE

    console = console_report(report)
    assert "with their draws + examples intervals, which decide the verdict" in console  # the interval, named
    line = next(x for x in console.splitlines() if x.startswith("mathneuro - unedited"))
    assert line.endswith(NO_DIFFERENCE) and " *" not in line
    assert f"[{row['ci95_low']:+.3f}, {row['ci95_high']:+.3f}]" in line  # the deciding interval, not the other

    with open(report["paired_csv"]) as f:
        (cells,) = list(csv.DictReader(f))
    assert cells["difference"] == NO_DIFFERENCE

    md = Path(report["markdown"]).read_text()
    table = [x for x in md.splitlines() if x.startswith("| mathneuro |") and "| baseline |" in x]
    assert len(table) == 1 and NO_DIFFERENCE in table[0] and "lower" not in table[0]
    assert "draws + examples (decides)" in md and "examples only" in md  # both intervals labelled
    assert "decided by the draws + examples interval alone" in md  # the footnote says which, and why

    paired = report_payload(report, wandb)["report/paired"]
    logged = dict(zip(paired.columns, paired.data[0], strict=True))
    assert logged["difference"] == NO_DIFFERENCE
    (history,) = paired_history(report["paired"])
    key = "paired/mathneuro/vs_baseline/race/acc"
    assert (history[f"{key}/ci_low"], history[f"{key}/ci_high"]) == (row["ci95_low"], row["ci95_high"])


def test_points_that_differ_only_in_task_template_are_two_rows_never_two_seeds(tmp_path):
    sweep = tmp_path / "sweep"
    write_records(sweep / "baseline_samples", BASE)
    write_point(sweep, "a", lose(4), template="Q: {q}\nA:")
    write_point(sweep, "b", lose(8), template="Question: {q}\nAnswer:")
    report = write_report(sweep)
    comparison = report["comparison"]
    assert len(comparison) == 2 and all(c["n"] == 1 for c in comparison)
    assert len({c["config.task.template"] for c in comparison}) == 2
    assert sorted(r["seeds"] for r in report["paired"]) == [1, 1]
    assert sorted(r["diff"] for r in report["paired"]) == pytest.approx([-0.2, -0.1])
    md = Path(report["markdown"]).read_text()
    assert "seeds=2" not in md
    assert all(md.count(c["config.task.template"]) >= 3 for c in comparison)  # comparison, paired and all points
    header = points_text(report["rows"], ["nonmath/race/acc"]).splitlines()[0]
    assert all(c["config.task.template"] in header for c in comparison)  # one column each
    with open(report["paired_csv"]) as f:
        assert len({r["config.task.template"] for r in csv.DictReader(f)}) == 2


def test_seeds_that_differ_only_in_where_they_log_are_pooled(tmp_path):
    sweep = tmp_path / "sweep"
    write_records(sweep / "baseline_samples", BASE)
    write_point(sweep, "a", lose(4), seed=0, project="one")
    write_point(sweep, "b", lose(6), seed=1, project="two")
    report = write_report(sweep)
    assert [c["n"] for c in report["comparison"]] == [2]
    assert [r["seeds"] for r in report["paired"]] == [2]
    assert not any(k.startswith("config.") for k in report["rows"][0])


def test_identity_is_the_config_less_seed_and_keys_that_cannot_change_numbers():
    result = {"config": {"seed": 3, "logger": {"project": "x"}, "cache_dir": "/c", "eval": {"progress": True,
                                                                                          "num_fewshot": 5},
                         "model": {"dtype": "bfloat16"}, "new_key": 1}}
    assert point_identity(result) == {"eval.num_fewshot": "5", "model.dtype": '"bfloat16"', "new_key": "1"}
    other = {"point": {"method": "m"}, "config": {**result["config"], "seed": 4, "eval": {"num_fewshot": 0}}}
    assert split_keys([{**result, "point": {"method": "m"}}, other], ["method"]) == ["eval.num_fewshot"]


def test_a_refused_comparison_is_counted_in_the_end_line_and_listed(tmp_path, capsys):
    from mathneuro.cli import report as report_cli
    from mathneuro.cli.sweep_status import status_line

    sweep = tmp_path / "sweep"
    write_records(sweep / "baseline_samples", BASE, prompt="a")
    write_point(sweep, "0", lose(4), prompt="b")  # another prompt than the unedited model's
    report = write_report(sweep)
    assert report["paired"] == [] and len(report["paired_notes"]) == 3  # and no random point: two more
    counted = "3 comparison(s) not made (no reference point: 2, prompts differ: 1)"
    line = status_line(sweep, None, sweep / "report", report["paired_notes"])
    assert f"; {counted}, listed above; report:" in line
    text = console_report(report).splitlines()
    start = text.index("Comparisons not made:")  # the console report ends with them
    assert text[start + 1].startswith("  - [prompts differ] task race: refused to pair") and len(text) == start + 4
    assert report_cli.main([str(sweep)]) == 0
    assert counted in capsys.readouterr().out.splitlines()[0]


def test_summary_writes_counts_as_integers_and_no_spread_for_one_seed(tmp_path):
    sweep = tmp_path / "sweep"
    write_records(sweep / "baseline_samples", BASE)
    write_point(sweep, "0", lose(4))
    md = Path(write_report(sweep)["markdown"]).read_text()
    assert "422,700" in md and "e+05" not in md
    assert "± 0" not in md and "0.65" in md


def test_a_sweep_that_asked_for_no_records_is_not_told_of_comparisons_not_made(tmp_path):
    from mathneuro.cli.sweep_status import status_line
    from mathneuro.report.not_made import NO_BASELINE, NOT_ASKED, NotMade, count_text

    never = NotMade(NOT_ASKED, "no per-example records in any of 2 point(s) (run with eval.log_samples=true)")
    assert count_text([never]) == "" and "not made" not in status_line(tmp_path, None, None, [never])
    assert count_text([never, NotMade(NO_BASELINE, "x")]) == "1 comparison(s) not made (no baseline: 1)"


def test_a_neuron_selection_is_a_share_of_neurons_never_of_parameters(tmp_path):
    sweep = tmp_path / "sweep"
    write_records(sweep / "baseline_samples", BASE)
    write_point(sweep, "0", lose(4), method="lape", selection={
        "num_selected": 1536, "num_scored": 30720, "num_parameters": 134515008, "fraction_of_model": 1536 / 134515008,
        "fraction_of_scored": 0.05, "num_weights_edited": 884736, "fraction_of_model_edited": 884736 / 134515008})
    md = Path(write_report(sweep)["markdown"]).read_text()
    lines = md[md.index("## Selection size"):].splitlines()
    header = [c.strip() for c in lines[2].split("|")]
    row = dict(zip(header, [c.strip() for c in lines[4].split("|")], strict=True))
    assert row["unit"] == "neurons" and row["selection/num_selected"] == "1,536"
    assert row["selection/fraction_of_scored"] == "0.05" and row["selection/fraction_of_model"] == ""
    assert row["selection/fraction_of_model_edited"] == format(884736 / 134515008, ".4g")
