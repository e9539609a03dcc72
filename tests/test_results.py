"""The results schema: one record type, its JSON form, the shapes old results come in, the flat row."""

from __future__ import annotations

import csv
import json

import pytest

from mathneuro.results.schema import PointResult, coerce, load, tidy_row

pytestmark = pytest.mark.unit

RESULT = {
    "status": "complete",
    "point": {"model": "tiny", "task": "gsm8k", "filter": "race", "method": "mathneuro", "top_k": 0.05,
              "intervention": "prune", "scalar": 0.0, "seed": 1, "num_samples": 8},
    "config": {"method": {"name": "mathneuro"}},
    "selection": {"method": "mathneuro", "top_k": 0.05, "num_selected": 30, "num_scored": 100, "num_parameters": 400,
                  "fraction_of_model": 0.075, "fraction_of_scored": 0.3, "per_layer": {"0": 10, "1": 20},
                  "per_module": {"q_proj": 30}},
    "metrics": {"math/arith/exact_match": 0.25, "math/arith/exact_match_stderr": 0.1, "nonmath/mc/acc": 0.5},
    "baseline_metrics": {"math/arith/exact_match": 0.5, "math/arith/exact_match_stderr": 0.1, "nonmath/mc/acc": 0.5},
    "timings": {"total": 1.5}, "peak_memory": {"load_model": {"rss_mb": 10.0}},
    "statistics_keys": ["a", "b"], "sample_ids_hash": {"task": "t", "filter": "f"}, "versions": {"torch": "2"},
    "objective": -0.5,
}


def test_round_trip_keeps_every_field_and_unknown_ones(tmp_path):
    data = {**RESULT, "samples": {"dir": "samples"}, "later_field": [1]}  # a field a later version adds
    (tmp_path / "results.json").write_text(json.dumps(data))
    record = load(tmp_path)
    assert record.extra == {"later_field": [1]} and record.samples == {"dir": "samples"} and record.complete
    assert record.to_json() == data
    record.write(tmp_path / "again.json")
    assert json.loads((tmp_path / "again.json").read_text()) == data


def test_historic_results_load():
    old = {k: v for k, v in RESULT.items() if k not in ("peak_memory", "objective")}
    old["sample_ids_hash"] = "abc"
    record = PointResult.from_json(old)
    assert record.peak_memory == {} and record.objective is None and record.sample_ids_hash == {"task": "abc"}
    assert "objective" not in record.row()


def test_row_is_flat_with_absolute_and_relative_changes_but_not_of_stderrs():
    row = tidy_row({**RESULT, "_job": "top_k=0.05"})
    assert row["job"] == "top_k=0.05" and row["method"] == "mathneuro" and row["objective"] == -0.5
    assert row["selection/num_selected"] == 30 and row["per_layer/1"] == 20 and row["per_module/q_proj"] == 30
    assert row["baseline/nonmath/mc/acc"] == 0.5 and row["rel_change/math/arith/exact_match"] == -0.5
    assert row["rel_change/nonmath/mc/acc"] == 0.0 and "rel_change/math/arith/exact_match_stderr" not in row
    before, after = RESULT["baseline_metrics"], RESULT["metrics"]
    name = "math/arith/exact_match"
    assert row[f"diff/{name}"] == pytest.approx(after[name] - before[name])  # absolute, in the metric's unit
    assert not any(k.startswith("delta/") for k in row) and f"diff/{name}_stderr" not in row


def test_rows_from_csv_and_summaries_coerce_to_records(tmp_path):
    row = tidy_row(RESULT)
    path = tmp_path / "points.csv"
    with path.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(row))
        writer.writeheader()
        writer.writerow(row)
    with path.open() as fh:
        text_row = next(csv.DictReader(fh))  # every value is a string now
    back = coerce(text_row)
    assert back.per_layer == {"0": 10, "1": 20} and back.point["top_k"] == 0.05 and back.point["seed"] == 1
    assert back.metrics["math/arith/exact_match"] == 0.25 and back.baseline_metrics["nonmath/mc/acc"] == 0.5
    assert back.row() == row
    summary = coerce(RESULT["selection"])
    assert summary.point == {"method": "mathneuro", "top_k": 0.05} and summary.per_layer == {"0": 10, "1": 20}
    with pytest.raises(TypeError):
        coerce([1, 2])
