"""A sweep folder is the record: it holds the unedited model's per-example records itself, so a
moved copy whose cache is gone gives the same report (issue 39)."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from mathneuro.pipeline.runner import run_point
from mathneuro.report import write_report
from tests.test_runner import base_overrides, cli, compose_cfg


def _rows(path: Path) -> list[dict]:
    with path.open() as fh:
        return list(csv.DictReader(fh))


def test_a_moved_sweep_without_its_cache_gives_the_same_report(tiny_dir: Path, tmp_path: Path) -> None:
    cache, sweep = tmp_path / "cache", tmp_path / "sweep"
    common = [*base_overrides(tiny_dir, cache), "num_samples=4", "max_length=32", "logger=none", "eval=quick",
              "eval.tasks=[arith]", "eval.log_samples=true", "eval.arith.num_problems=6", "top_k=0.2"]
    for name, method in (("mathneuro", "mathneuro"), ("random", "random")):
        cfg = compose_cfg([*common, f"method={method}"])
        run_point(OmegaConf.to_object(cfg), sweep / f"method={name}", sweep_dir=sweep)
    copies = sorted((sweep / "baseline_samples").iterdir())
    assert len(copies) == 1 and not copies[0].is_symlink()  # one copy for the sweep, a real folder
    assert (copies[0] / "arith.jsonl").is_file() and not (copies[0] / "arith.jsonl").is_symlink()
    before = write_report(sweep)
    assert before["paired"] and not before["paired_notes"]
    tables = {name: _rows(sweep / "report" / name) for name in ("points.csv", "paired.csv")}

    moved = tmp_path / "archive" / "moved"
    shutil.move(str(sweep), moved)
    shutil.rmtree(cache)
    after = write_report(moved)
    assert after["paired_notes"] == before["paired_notes"] == []
    assert {name: _rows(moved / "report" / name) for name in tables} == tables  # the same tables
    assert len(after["paired"]) == len(before["paired"]) and {r["reference"] for r in after["paired"]} == {
        "baseline", "random"}
    assert _rows(moved / "report" / "points.csv") and "Comparisons not made" not in (
        moved / "report" / "summary.md").read_text()


def test_a_comparison_that_cannot_be_made_ends_the_report(tmp_path: Path, capsys) -> None:
    from mathneuro.cli import report as report_cli
    from tests.records_sweeps import GSM, RACE, lose, write_point

    # a sweep written before 0.2: its baseline_dir points into a cache that was cleared
    write_point(tmp_path, "0", "mathneuro", 0, {"gsm": lose(GSM, 10), "race": lose(RACE, 2)})
    assert report_cli.main([str(tmp_path)]) == 0
    out = capsys.readouterr().out.rstrip().splitlines()
    summary = (tmp_path / "report" / "summary.md").read_text().rstrip().splitlines()
    assert "comparison(s) not made (" in out[0] and "no baseline: 1" in out[0]  # counted first, by reason
    for lines, header in ((out, "Comparisons not made"), (summary, "## Comparisons not made")):
        start = max(i for i, line in enumerate(lines) if line.startswith(header))
        notes = [line for line in lines[start + 1:] if line.strip()]
        assert notes and all(line.lstrip().startswith("- ") for line in notes)  # the list ends the report
        gone = [line for line in notes if "unedited model's records" in line and "[no baseline]" in line]
        assert len(gone) == 1 and "baseline_samples" in gone[0] and "not compared with the baseline" in gone[0]


@pytest.mark.e2e
@pytest.mark.integration
def test_a_cli_sweep_moved_without_its_cache_reports_the_same(tiny_dir: Path, tmp_path: Path, capsys) -> None:
    from mathneuro.cli import report as report_cli

    cache, sweep = tmp_path / "cache", tmp_path / "sweep"
    args = ["-m", *base_overrides(tiny_dir, cache), "num_samples=4", "max_length=32", "logger=none", "eval=quick",
            "eval.tasks=[arith]", "eval.log_samples=true", "eval.arith.num_problems=6", "top_k=0.2",
            "method=mathneuro,random", f"hydra.sweep.dir={sweep}"]
    res = cli(args, cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-3000:]
    (copy,) = (sweep / "baseline_samples").iterdir()
    results = sorted(sweep.glob("*/results.json"))
    assert len(results) == 2
    for path in results:
        assert json.loads(path.read_text())["samples"]["baseline_dir"] == f"../baseline_samples/{copy.name}"
    before = _rows(sweep / "report" / "paired.csv")
    assert {r["reference"] for r in before} == {"baseline", "random"}

    moved = tmp_path / "laptop" / "sweep"
    shutil.move(str(sweep), moved)
    shutil.rmtree(cache)
    assert report_cli.main([str(moved)]) == 0
    assert "comparisons not made" not in capsys.readouterr().out
    assert _rows(moved / "report" / "paired.csv") == before
