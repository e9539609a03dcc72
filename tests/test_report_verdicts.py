"""The paired report's verdicts: ``mathneuro-report --margin --family``, the Python API, the
in-sweep callback's ``report.margin`` / ``report.families`` and their validation."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from mathneuro.cli import report as report_cli
from mathneuro.pipeline.config import ConfigError, validate
from mathneuro.report import paired
from tests.records_sweeps import GSM, RACE, lose, records_sweep
from tests.test_runner import compose_cfg

EM = "exact_match,strict-match"


@pytest.fixture
def sweep(tmp_path: Path) -> Path:
    return records_sweep(
        tmp_path / "sweep",
        ("0", "mathneuro", 0, {"gsm": lose(GSM, 10), "race": lose(RACE, 2)}),
        ("1", "mathneuro", 1, {"gsm": lose(GSM, 8), "race": RACE}),
        ("2", "random", 0, {"gsm": lose(GSM, 1), "race": RACE}),
        ("3", "random", 1, {"gsm": lose(GSM, 2), "race": lose(RACE, 1)}),
    )


def read_csv(path: Path) -> tuple[list[str], dict[tuple, dict]]:
    with path.open() as fh:
        reader = csv.DictReader(fh)
        rows = list(reader)
    return list(reader.fieldnames or []), {(r["method"], r["reference"], r["task"], r["metric"]): r for r in rows}


def test_cli_margin_and_family_write_verdicts_into_paired_csv(sweep: Path, capsys) -> None:
    argv = [str(sweep), "--margin", "0.05", "--family", "vs_random:reference=random"]
    assert report_cli.main(argv) == 0
    fields, rows = read_csv(sweep / "report" / "paired.csv")
    assert fields == [*paired.COLUMNS, *paired.EXTRA_COLUMNS]  # old columns first, unchanged
    gsm = rows[("mathneuro", "baseline", "gsm8k", EM)]
    assert (int(gsm["changed_up"]), int(gsm["changed_down"])) == (0, 18)  # 10 + 8 answers lost over two draws
    assert gsm["draw_diffs"] == f"{-10 / 30:.4g};{-8 / 30:.4g}"
    assert gsm["equivalence"] == "not equivalent" and gsm["difference"] == "lower"
    assert float(gsm["ci95_high"]) < -0.05 and gsm["interval"] == "bootstrap+newcombe"
    assert gsm["family"] == "" and gsm["holm_difference"] == ""  # a baseline row is in no family
    vs = rows[("mathneuro", "random", "gsm8k", EM)]
    assert vs["family"] == "vs_random" and vs["holm_difference"] == "lower" and vs["margin"] == "0.05"
    race = rows[("mathneuro", "random", "race", "acc")]
    assert race["holm_equivalence"] in ("inconclusive", "equivalent")
    assert race["holm_difference"] == "no difference shown"
    summary = (sweep / "report" / "summary.md").read_text()
    assert "within +-0.05" in summary and "changed +/-" in summary and "(Holm: lower)" in summary


def test_cli_refuses_a_bad_margin_or_family(sweep: Path, capsys) -> None:
    assert report_cli.main([str(sweep), "--margin", "-0.1"]) == 2
    assert "--margin" in capsys.readouterr().err
    assert report_cli.main([str(sweep), "--family", "x:task"]) == 2
    assert "--family" in capsys.readouterr().err


def test_python_api_takes_the_same_settings(sweep: Path) -> None:
    rows = paired.paired_comparisons(sweep, resamples=300, margin=0.5, families=["all"])
    assert {r["family"] for r in rows} == {"all"}
    # a margin of 0.5 is wide: every row with a small difference is shown equivalent
    small = [r for r in rows if abs(r["diff"]) < 0.1]
    assert small and all(r["equivalence"] == "equivalent" for r in small)
    plain = paired.paired_comparisons(sweep, resamples=300)
    assert all(r["margin"] is None and r["equivalence"] is None and r["family"] is None for r in plain)


def test_the_sweep_callback_reads_report_margin_and_families(sweep: Path) -> None:
    from mathneuro.cli.callbacks import SweepReport

    SweepReport().on_multirun_end(OmegaConf.create({
        "hydra": {"sweep": {"dir": str(sweep)}}, "logger": {"name": "none"},
        "report": {"margin": 0.03, "families": ["f:task=race"]}}))
    _, rows = read_csv(sweep / "report" / "paired.csv")
    assert {r["margin"] for r in rows.values()} == {"0.03"}
    assert {r["family"] for r in rows.values() if r["task"] == "race"} == {"f"}


@pytest.mark.parametrize(("override", "key"), [("report.margin=-1", "report.margin"),
                                               ("report.families=['x:task']", "report.families")])
def test_report_settings_are_validated_before_any_model_loads(override: str, key: str) -> None:
    cfg = OmegaConf.to_object(compose_cfg([override]))
    with pytest.raises(ConfigError, match=rf"^{key}: "):
        validate(cfg)
    good = OmegaConf.to_object(compose_cfg(["report.margin=0.03", "report.families=['a:reference=random']"]))
    validate(good)
