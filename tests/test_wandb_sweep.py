"""A 2 x 2 sweep logged offline to W&B, read back with wandb's own record reader: the layout a user compares
runs by (groups, names, tags, summaries, metric definitions, tables, artifacts) and the sweep's one report run."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

import mathneuro
from tests.test_runner import base_overrides, cli
from tests.wandb_records import RunRecords, read_run

pytestmark = pytest.mark.integration  # runs the CLI in subprocesses

STAMP = ("2026-01-02", "03-04-05")
LOUD = {"WANDB_SILENT": "false"}  # the tests' default (conftest) would hide W&B's banners whatever mathneuro asks
SCALARS = ("1.1", "1.3")
METHOD_NAMES = ("mathneuro", "random")


def sweep_args(tiny_dir: Path, tmp_path: Path, sweep: Path) -> list[str]:
    return ["-m", *base_overrides(tiny_dir, tmp_path / "cache"), "eval=quick", "eval.limit=4", "eval.log_samples=true",
            "intervention=scale", f"intervention.scalar={','.join(SCALARS)}", f"method={','.join(METHOD_NAMES)}",
            f"hydra.sweep.dir={sweep}"]


def point_runs(sweep: Path) -> dict[Path, RunRecords]:
    """Each point folder's one offline run."""
    out = {}
    for results in sorted(sweep.glob("*/results.json")):
        (folder,) = (results.parent / "wandb").glob("offline-run-*")
        out[results.parent] = read_run(folder)
    return out


@pytest.fixture(scope="module")
def swept(tiny_dir, tmp_path_factory):
    """The sweep, run twice (the second time every point is skipped and the report rewritten)."""
    tmp_path = tmp_path_factory.mktemp("wandb-sweep")
    sweep = tmp_path / "outputs" / "multirun" / STAMP[0] / STAMP[1]
    first = cli(sweep_args(tiny_dir, tmp_path, sweep), cwd=tmp_path, env=LOUD)
    assert first.returncode == 0, first.stderr[-3000:]
    runs = point_runs(sweep)
    reports_before = sorted((sweep / "report" / "wandb").glob("offline-run-*"))
    second = cli(sweep_args(tiny_dir, tmp_path, sweep), cwd=tmp_path)
    assert second.returncode == 0, second.stderr[-3000:]
    return {"sweep": sweep, "first": first, "second": second, "runs": runs, "reports_before": reports_before}


@pytest.mark.e2e
def test_every_point_and_the_report_share_the_sweeps_group_with_short_unique_names(swept):
    runs = swept["runs"]
    assert len(runs) == 4
    groups = {r.run["run_group"] for r in runs.values()}
    assert groups == {f"sweep-{STAMP[0]}_{STAMP[1]}"}  # the experiment name (none: "sweep"), date and time
    names = {r.run["display_name"] for r in runs.values()}
    assert names == {f"{m} K=0.05 s={s} seed=0" for m in METHOD_NAMES for s in SCALARS}
    assert all(len(n) <= 64 for n in names)
    assert {(r.run["job_type"], r.config["point"]["method"]) for r in runs.values()} == {(m, m) for m in METHOD_NAMES}
    for folder, r in runs.items():
        point = json.loads((folder / "results.json").read_text())["point"]
        assert set(r.run["tags"]) >= {f"method={point['method']}", "intervention=scale", "model=tiny",
                                      "task=embedded_math", "filter=embedded_nonmath", "K=0.05",
                                      f"scalar={point['scalar']}", "seed=0", "eval=quick"}
    (report,) = swept["reports_before"]
    rep = read_run(report)
    assert rep.run["run_group"] in groups and rep.run["job_type"] == "report"


def test_a_points_summary_has_absolute_and_relative_changes_and_every_metric_a_direction(swept):
    for folder, r in swept["runs"].items():
        results = json.loads((folder / "results.json").read_text())
        after, before = results["metrics"], results["baseline_metrics"]
        for name, value in after.items():
            assert r.summary[name] == pytest.approx(value)
            assert r.summary[f"baseline/{name}"] == pytest.approx(before[name])
            if not name.endswith("_stderr"):
                assert r.summary[f"diff/{name}"] == pytest.approx(value - before[name])  # absolute, says so
                if before[name]:
                    assert r.summary[f"rel_change/{name}"] == pytest.approx((value - before[name]) / before[name])
        assert not [k for k in r.summary if k.startswith("delta/")]  # no name that hides which change it is
        assert r.summary["top_k"] == 0.05 and r.summary["scalar"] == results["point"]["scalar"]
        defined = {m["name"]: m.get("summary") for m in r.metrics if m.get("name")}
        for name in after:
            for key in (name, f"baseline/{name}"):
                assert key in defined, key
        assert defined["math/arith/exact_match"] == {"max": True}  # accuracy: up
        assert defined["diff/nonmath/ppl/token_perplexity"] == {"min": True}  # perplexity: down
        assert r.config["metric_directions"]["nonmath/mc/acc"] == "up"


def test_per_example_tables_and_artifacts(swept):
    for folder, r in swept["runs"].items():
        results = json.loads((folder / "results.json").read_text())
        table = r.table("samples/mc")
        assert table["columns"][:5] == ["doc_id", "prompt", "target", "answer", "baseline_answer"]  # both answers
        assert {"acc", "baseline/acc", "prompt_hash", "same_prompt"} <= set(table["columns"])
        records = [json.loads(line) for line in (folder / "samples" / "mc.jsonl").read_text().splitlines()]
        assert len(table["data"]) == len(records) == 4
        row = dict(zip(table["columns"], table["data"][0], strict=True))
        assert row["prompt_hash"] == records[0]["prompt_hash"] and row["same_prompt"] is True
        assert row["prompt"] == records[0]["prompt"] and row["prompt"].startswith("Question: ")  # which problem
        arith = dict(zip(*(lambda t: (t["columns"], t["data"][0]))(r.table("samples/arith")), strict=True))
        assert 0 < len(arith["prompt"]) <= 300 and arith["prompt"].endswith(" =")  # the end of a few-shot prompt
        assert isinstance(arith["baseline_answer"], str) and isinstance(arith["answer"], str)
        assert not row["answer"].isdigit() and not row["target"].isdigit()  # choices by their text, not an index
        selection = r.artifact("selection")
        assert selection["name"] == f"selection-{r.run['run_id']}" and "selection.safetensors" in selection["files"]
        meta = selection["metadata"]
        assert (meta["method"], meta["top_k"], meta["model"]) == (results["point"]["method"], 0.05, "tiny")
        assert meta["statistics_keys"] == results["statistics_keys"] and meta["group"] == r.run["run_group"]
        res = r.artifact("results")
        assert {"results.json", "samples/arith.jsonl", "samples/mc.jsonl",
                "baseline_samples/mc.jsonl"} <= set(res["files"])
        assert res["metadata"]["scalar"] == results["point"]["scalar"]
        assert not [a for a in r.artifacts if a["type"] == "model"]  # export_model=false


def test_provenance_in_results_and_the_run_config(swept):
    for folder, r in swept["runs"].items():
        prov = json.loads((folder / "results.json").read_text())["provenance"]
        assert prov["version"] == mathneuro.__version__ == prov["packages"]["mathneuro"]
        assert re.fullmatch(r"[0-9a-f]{40}", prov["git"]["commit"]) and isinstance(prov["git"]["dirty"], bool)
        assert {"torch", "transformers", "lm_eval", "hydra-core"} <= set(prov["packages"])
        assert prov["tasks"]["arith"]["n_shot"] == 5
        assert prov["tasks"]["arith"]["higher_is_better"] == {"exact_match": True}
        assert prov["tasks"]["ppl"]["higher_is_better"]["token_perplexity"] is False
        assert r.config["provenance"]["git"] == prov["git"]
        records = [json.loads(x) for x in (folder / "samples" / "arith.jsonl").read_text().splitlines()]
        assert all(len(rec["prompt_hash"]) == 64 and len(rec["doc_hash"]) == 64 for rec in records)


def test_one_report_run_per_sweep_with_one_history_row_per_compared_point(swept):
    reports = sorted((swept["sweep"] / "report" / "wandb").glob("offline-run-*"))
    assert len(reports) == 2  # written at the end of each of the two runs of the sweep ...
    first, second = (read_run(p) for p in reports)
    assert first.run["run_id"] == second.run["run_id"]  # ... into the same run, resumed
    identity = json.loads((swept["sweep"] / ".wandb_sweep.json").read_text())
    assert first.run["run_id"] == identity["report_run_id"] and first.run["run_group"] == identity["group"]
    rows = [h for h in second.history if "K" in h]
    assert len(rows) == 4  # one per compared point
    expected = {(m, float(s), 0.05) for m in METHOD_NAMES for s in SCALARS}
    assert {(h["method"], h["scalar"], h["K"]) for h in rows} == expected
    mathneuro_rows = [h for h in rows if h["method"] == "mathneuro"]
    for h in mathneuro_rows:
        key = f"paired/mathneuro/s={h['scalar']}/vs_random/arith/exact_match"
        assert h[key + "/ci_low"] <= h[key] <= h[key + "/ci_high"]
        assert f"paired/mathneuro/s={h['scalar']}/vs_baseline/mc/acc" in h
    paired = [line for line in (swept["sweep"] / "report" / "paired.csv").read_text().splitlines()[1:] if line]
    assert sum(1 for h in rows for k in h if k.startswith("paired/") and not k.endswith(("/ci_low", "/ci_high"))) \
        == len(paired)  # every paired.csv row is a plottable number
    steered = [m for m in second.metrics if m.get("glob_name") == "paired/*"]
    assert steered and steered[0]["step_metric"] == "K"  # the K plot needs no custom chart


def test_quiet_with_one_status_line_and_stages_in_each_points_log(swept):
    first, second = swept["first"], swept["second"]
    said = first.stdout + first.stderr
    assert not [line for line in said.splitlines() if line.startswith("wandb:")]  # no W&B banners
    sweep = swept["sweep"]
    assert f"sweep {sweep}: 4 point(s) complete, 0 already done, 0 failed; report: {sweep / 'report'}" in said
    assert f"sweep {sweep}: 4 point(s) already done, nothing to run; report:" in second.stdout
    logs = [(folder / "mathneuro.log").read_text() for folder in swept["runs"]]
    for text in logs:
        assert "statistics embedded_math/linear_inputs:" in text and "selection: " in text
        assert "eval [edited model] arith" in text and re.search(r"W&B run '(mathneuro|random) K=0\.05 s=1\.[13] "
                                                                 r"seed=0' \(id ",
                                                                 text)
        assert "unedited model: " in text
        folder = re.search(r"W&B run '[^']*' \(id \w+, group [\w-]+\): (\S+) \(offline; upload it with `wandb sync "
                           r"(\S+)`\)",
                           text)
        assert folder and folder.group(1) == folder.group(2) and Path(folder.group(1)).is_dir(), text[-2000:]
    assert sum("eval [unedited model] arith" in text for text in logs) == 1  # evaluated once, then from the cache


@pytest.mark.e2e
def test_logger_group_name_and_tags_are_honoured_and_verbose_brings_the_banners_back(tiny_dir, tmp_path):
    out = tmp_path / "run"
    res = cli([*base_overrides(tiny_dir, tmp_path / "cache"), "eval=none", "logger.group=my-comparison",
               "logger.run_name='{method} at {K}'", "logger.tags=[first-try]", "logger.project=elsewhere",
               "logger.verbose=true", "export_model=true", f"hydra.run.dir={out}"], cwd=tmp_path, env=LOUD)
    assert res.returncode == 0, res.stderr[-3000:]
    assert [line for line in (res.stdout + res.stderr).splitlines() if line.startswith("wandb:")]
    (folder,) = (out / "wandb").glob("offline-run-*")
    r = read_run(folder)
    assert (r.run["run_group"], r.run["display_name"], r.run["project"]) == ("my-comparison", "mathneuro at 0.05",
                                                                             "elsewhere")
    assert "first-try" in r.run["tags"] and "method=mathneuro" in r.run["tags"]
    model = r.artifact("model")  # the exported model, by reference
    assert "model/model.safetensors" in model["files"] and model["metadata"]["method"] == "mathneuro"
    assert r.artifact("results")["files"] == ["results.json"]  # no per-example records without eval.log_samples
    bad = cli([*base_overrides(tiny_dir, tmp_path / "cache"), "eval=none", "logger.run_name='{nope}'",
               f"hydra.run.dir={tmp_path / 'bad'}"], cwd=tmp_path)
    assert bad.returncode == 2 and "logger.run_name" in bad.stderr.strip().splitlines()[-1]
