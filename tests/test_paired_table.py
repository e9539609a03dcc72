"""experiments/claims/paired_table.py: the claim's rows of paired.csv files as one markdown table."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from mathneuro.report import paired
from tests.conftest import load_experiment

pytestmark = pytest.mark.unit


def _write(path: Path, rows: list[dict]) -> Path:
    with path.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=[*paired.COLUMNS, *paired.EXTRA_COLUMNS])
        writer.writeheader()
        writer.writerows(rows)
    return path


def _row(**kw) -> dict:
    base = {"method": "mathneuro", "reference": "random", "task": "arith", "metric": "exact_match", "top_k": 0.15,
            "scalar": 0.0, "seeds": 3, "n_examples": 50, "diff": -0.5, "ci_low": -0.6, "ci_high": -0.4,
            "side": "math", "model": "tiny", "filter": "race", "intervention": "prune", "num_samples": 200}
    return {**base, **kw}


def test_rows_are_filtered_and_intervals_that_exclude_zero_are_marked(tmp_path, capsys):
    table = load_experiment("claims/paired_table")
    path = _write(tmp_path / "paired.csv", [
        _row(), _row(task="mc", metric="acc", diff=-0.01, ci_low=-0.05, ci_high=0.03),
        _row(top_k=0.05), _row(task="mmlu_anatomy", metric="acc"),
        _row(method="mathneuro", reference="baseline", intervention="scale", scalar=1.1, top_k=0.05, diff=0.06,
             ci_low=0.01, ci_high=0.11),
    ])
    assert table.main([str(path), "--metric", "arith/exact_match", "--metric", "mc/acc", "--top-k", "0.15"]) == 0
    lines = capsys.readouterr().out.splitlines()[2:]
    assert len(lines) == 2
    assert "arith / exact_match" in lines[0] and "-0.500 [-0.600, -0.400] *" in lines[0]
    assert "mc / acc" in lines[1] and "-0.010 [-0.050, +0.030] |" in lines[1]  # covers 0: no mark
    assert table.main([str(path), "--top-k", "0.05", "--metric", "arith/exact_match"]) == 0
    out = capsys.readouterr().out
    assert "prune, K = 5 %" in out and "scale s = 1.1, K = 5 %" in out and "+0.060 [+0.010, +0.110] *" in out
    assert table.main([str(path), "--metric", "nope/acc"]) == 1
