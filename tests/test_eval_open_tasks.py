"""Evaluation beyond our table: the user's task YAMLs (eval.include_path), any lm-eval name (validated before a
model loads), per-task limits for any task, and per-example records (eval.log_samples) in the run directory."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from mathneuro.evaluation import EvalConfig, Evaluator
from mathneuro.evaluation.samples import column_mean, read_records, records_from_lm_eval
from mathneuro.models.tiny import tiny_model
from tests.lm_eval_tasks import generation_task

MC_YAML = """\
task: {name}
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}
output_type: multiple_choice
test_split: test
doc_to_text: "Question: {{{{question}}}}\\nAnswer:"
doc_to_choice: "{{{{choices}}}}"
doc_to_target: label
metric_list:
  - metric: acc
    aggregation: mean
    higher_is_better: true
metadata:
  version: 1.0
"""

HELPERS = '''\
from mathneuro.evaluation import math_answers_equal


def process_results(doc, results):
    answer = results[0].strip()
    return {"exact_match": float(answer == doc["answer"]),
            "math_verify": float(math_answers_equal(answer, doc["answer"]))}
'''

SUITE_YAML = """\
group: my_suite
task: [my_mc2, my_mc3]
aggregate_metric_list:
  - metric: acc
    aggregation: mean
    weight_by_size: true
metadata:
  version: 1.0
"""


def write_user_tasks(root: Path) -> Path:
    """A user's task folder, as README's "Evaluate on your own tasks" shows: YAMLs, a helper, local json data."""
    data = root / "data"
    data.mkdir(parents=True)
    with (data / "mc.jsonl").open("w") as fh:
        for i in range(5):
            fh.write(json.dumps({"question": f"Which is a colour ({i})?", "choices": ["red", "table", "run"],
                                 "label": 0}) + "\n")
    with (data / "math.jsonl").open("w") as fh:
        for problem, answer in (("Half of one?", r"\frac{1}{2}"), ("Root of eight?", r"2\sqrt{2}"),
                                ("One plus one?", "2")):
            fh.write(json.dumps({"problem": problem, "answer": answer}) + "\n")
    tasks = root / "my_tasks"
    tasks.mkdir()
    for name in ("my_mc", "my_mc2", "my_mc3"):
        (tasks / f"{name}.yaml").write_text(MC_YAML.format(name=name, data=data / "mc.jsonl"))
    (tasks / "my_math.yaml").write_text(generation_task(
        "my_math", {"test": data / "math.jsonl"}, doc_to_text="Problem: {{problem}}\nAnswer:", doc_to_target="answer",
        until=["\n"], max_gen_toks=4, process_results="my_helpers.process_results",
        metrics=("exact_match", "math_verify")))
    (tasks / "my_helpers.py").write_text(HELPERS)
    (tasks / "my_suite.yaml").write_text(SUITE_YAML)
    return tasks


@pytest.fixture(scope="module")
def user_root(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("user")
    write_user_tasks(root)
    return root


def test_user_yamls_run_through_include_path_with_sides_limits_and_records(user_root, monkeypatch, caplog):
    monkeypatch.chdir(user_root)  # a relative include path is resolved against where the command started
    cfg = EvalConfig(name="mine", tasks=["my_mc", "my_math", "my_suite"], include_path="my_tasks",
                     math_tasks=["my_math"], limit=2, limits={"my_mc": 3}, batch_size=4, bootstrap_iters=0,
                     log_samples=True)
    assert cfg.include_paths() == [(user_root / "my_tasks").resolve()]
    model, tok = tiny_model("llama")
    ev = Evaluator(model, tok, cfg)
    with caplog.at_level(logging.WARNING, logger="mathneuro.evaluation.evaluator"):
        metrics = ev.evaluate()
        again = ev.evaluate()
    assert metrics == again
    notes = [r.getMessage() for r in caplog.records if "counted as non-math" in r.getMessage()]
    assert len(notes) == 2 and any("'my_mc'" in n for n in notes) and any("'my_suite'" in n for n in notes)

    # sides: my_math is listed as math; the others are in neither list -> non-math; groups add their subtasks
    assert {k for k in metrics if "/my_math/" in k} == {"math/my_math/exact_match", "math/my_math/math_verify"}
    assert set(metrics) >= {"nonmath/my_mc/acc", "nonmath/my_suite/acc", "nonmath/my_mc2/acc", "nonmath/my_mc3/acc"}
    assert not any(k.startswith("math/my_mc") for k in metrics)
    # eval.limits applies to a task outside the old table; eval.limit to the rest (per subtask of a group)
    assert ev.last_num_examples == {"my_mc": 3, "my_math": 2, "my_suite": 4}

    # per-example records: one line per evaluated example, the mean of each column is the reported metric
    assert set(ev.last_samples) == {"my_mc", "my_math", "my_mc2", "my_mc3", "my_suite"}
    assert ev.last_sample_kinds == {"my_mc": "nonmath", "my_math": "math", "my_mc2": "nonmath", "my_mc3": "nonmath",
                                    "my_suite": "nonmath"}
    assert [r["doc_id"] for r in ev.last_samples["my_mc"]] == [0, 1, 2]
    assert column_mean(ev.last_samples["my_mc"], "acc") == pytest.approx(metrics["nonmath/my_mc/acc"])
    for metric in ("exact_match", "math_verify"):
        assert column_mean(ev.last_samples["my_math"], metric) == pytest.approx(metrics[f"math/my_math/{metric}"])
    assert all(isinstance(r["answer"], str) for r in ev.last_samples["my_math"])
    # no filter list: the answer is the raw generation, which the records keep too
    assert all(r["response"] == r["answer"] for r in ev.last_samples["my_math"])
    # multiple choice: no generation, the chosen and the right choice by their text, each prompt's hash
    for record in ev.last_samples["my_mc"]:
        assert "response" not in record and record["target"] == "red" and record["answer"] in ("red", "table", "run")
        assert record["acc"] == float(record["answer"] == "red") and len(record["prompt_hash"]) == 64
    suite = ev.last_samples["my_mc2"] + ev.last_samples["my_mc3"]
    assert len(suite) == 4 and column_mean(suite, "acc") == pytest.approx(metrics["nonmath/my_suite/acc"])
    # the group's pooled records: both subtasks' examples, tagged, whose mean is the group's metric
    pooled = ev.last_samples["my_suite"]
    assert sorted((r["subtask"], r["doc_id"]) for r in pooled) == [("my_mc2", 0), ("my_mc2", 1), ("my_mc3", 0),
                                                                  ("my_mc3", 1)]
    assert column_mean(pooled, "acc") == pytest.approx(metrics["nonmath/my_suite/acc"])


def test_records_keep_each_filters_answer_and_the_raw_generation():
    """lm-eval logs one sample per (example, filter); a record joins them: every filter's score and answer, the
    first filter's answer as ``answer``, the raw generation as ``response`` (what shows why filters disagree)."""
    response = "She has 3 + 15 = 18 apples. The answer is 18.\n\nThat is 2 more than 16."
    logged = [
        {"doc_id": 0, "filter": "strict-match", "metrics": ["exact_match"], "exact_match": 1.0,
         "resps": [[response]], "filtered_resps": ["18"]},
        {"doc_id": 0, "filter": "flexible-extract", "metrics": ["exact_match"], "exact_match": 0.0,
         "resps": [[response]], "filtered_resps": ["16."]},
        {"doc_id": 1, "filter": "none", "metrics": ["acc"], "acc": True,  # a multiple-choice example
         "resps": [[["-1.5", False]], [["-0.5", True]]], "filtered_resps": [["-1.5", False], ["-0.5", True]]},
    ]
    gen, mc = records_from_lm_eval(logged)
    assert gen == {"doc_id": 0, "exact_match,strict-match": 1.0, "exact_match,flexible-extract": 0.0,
                   "answer": "18", "answer,strict-match": "18", "answer,flexible-extract": "16.",
                   "response": response}
    assert mc == {"doc_id": 1, "acc": 1.0}


def test_fingerprint_follows_user_task_files_not_log_samples(user_root):
    folder = str(user_root / "my_tasks")
    base = EvalConfig(tasks=["my_mc"], include_path=folder).fingerprint()
    assert base == EvalConfig(tasks=["my_mc"], include_path=[folder], log_samples=True).fingerprint()
    assert base != EvalConfig(tasks=["my_mc"], include_path=folder, limits={"my_mc": 2}).fingerprint()
    helper = user_root / "my_tasks" / "my_helpers.py"
    text = helper.read_text()
    try:
        helper.write_text(text + "\n# edited\n")
        assert EvalConfig(tasks=["my_mc"], include_path=folder).fingerprint() != base
    finally:
        helper.write_text(text)


def test_stock_names_validate_without_loading_anything_and_typos_get_a_suggestion(tmp_path):
    EvalConfig(tasks=["arc_easy", "boolq", "mmlu_anatomy", "ai2_arc"]).validate()  # task, task, subtask, group
    with pytest.raises(ValueError, match=r"^eval.tasks: unknown task 'hellaswagg'; did you mean hellaswag\?$"):
        EvalConfig(tasks=["hellaswagg"]).validate()
    with pytest.raises(ValueError, match=r"^eval.include_path: no such directory 'nowhere'"):
        EvalConfig(tasks=["arith"], include_path="nowhere").validate()
    with pytest.raises(ValueError, match=r"unknown task 'xq_zz_ww'; list lm-eval's tasks"):
        EvalConfig(tasks=["xq_zz_ww"]).validate()
    with pytest.raises(ValueError, match=r"^eval.tasks: 'math500_local' is one of mathneuro's local tasks"):
        EvalConfig(tasks=["math500_local"]).validate()  # our twins by their own names need a data dir


@pytest.mark.integration
def test_cli_refuses_a_misspelt_task_with_exit_2_and_one_line(tmp_path):
    model_dir = tmp_path / "tiny"
    model, tok = tiny_model("llama")
    model.save_pretrained(model_dir)
    tok.save_pretrained(model_dir)
    env = {**os.environ, "WANDB_MODE": "offline", "HYDRA_FULL_ERROR": "0"}
    res = subprocess.run(
        [sys.executable, "-m", "mathneuro", f"model.name_or_path={model_dir}", "model.name=tiny",
         "model.device=cpu", "model.dtype=float32", f"cache_dir={tmp_path / 'cache'}", "eval.tasks=[arc_eay]",
         "eval.limits.arc_eay=3", f"hydra.run.dir={tmp_path / 'out'}"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300, env=env)
    assert res.returncode == 2, res.stderr[-2000:]
    assert res.stderr.strip().splitlines()[-1] == (
        "mathneuro: error: eval.tasks: unknown task 'arc_eay'; did you mean arc_easy?")


def test_run_point_writes_records_for_the_run_and_once_for_the_baseline(user_root, tmp_path):
    from hydra import compose, initialize_config_dir

    from mathneuro.cli.run import config_dir, job_dirname
    from mathneuro.pipeline.config import register_configs
    from mathneuro.pipeline.runner import run_point

    model_dir = tmp_path / "tiny"
    model, tok = tiny_model("llama")
    model.save_pretrained(model_dir)
    tok.save_pretrained(model_dir)
    register_configs()
    if not OmegaConf.has_resolver("mathneuro_dirname"):
        OmegaConf.register_new_resolver("mathneuro_dirname", job_dirname)

    def point(top_k: float, out: Path) -> dict:
        overrides = [f"model.name_or_path={model_dir}", "model.name=tiny", "model.dtype=float32",
                     "model.device=cpu", f"cache_dir={tmp_path / 'cache'}", "num_samples=4", "batch_size=4",
                     "max_length=32", "progress=false", "logger=none", "eval=quick", "eval.tasks=[my_mc,arith]",
                     f"eval.include_path={user_root / 'my_tasks'}", "eval.log_samples=true", "eval.limit=4",
                     "eval.arith.num_problems=4", "eval.bootstrap_iters=0", f"top_k={top_k}"]
        with initialize_config_dir(config_dir=config_dir(), version_base="1.3"):
            cfg = compose(config_name="config", overrides=overrides)
        return run_point(OmegaConf.to_object(cfg), out)

    results = point(0.2, tmp_path / "run1")
    summary = results["samples"]
    assert summary["dir"] == "samples" and summary["tasks"] == {"my_mc": "nonmath", "arith": "math"}
    # the arith probe writes its records too: one per problem, their mean the reported exact match
    arith = read_records(tmp_path / "run1" / "samples" / "arith.jsonl")
    assert [r["doc_id"] for r in arith] == [0, 1, 2, 3]
    assert column_mean(arith, "exact_match") == pytest.approx(results["metrics"]["math/arith/exact_match"])
    assert all(r["exact_match"] == float(r["answer"] == r["target"]) for r in arith)
    records = read_records(tmp_path / "run1" / "samples" / "my_mc.jsonl")
    assert len(records) == 4 and column_mean(records, "acc") == pytest.approx(results["metrics"]["nonmath/my_mc/acc"])
    baseline_dir = tmp_path / "run1" / summary["baseline_dir"]  # relative to the run dir: the folder is the record
    assert not Path(summary["baseline_dir"]).is_absolute() and (baseline_dir / "my_mc.jsonl").is_file()
    base_records = read_records(baseline_dir / "my_mc.jsonl")
    assert [r["doc_id"] for r in base_records] == [r["doc_id"] for r in records]
    assert column_mean(base_records, "acc") == pytest.approx(results["baseline_metrics"]["nonmath/my_mc/acc"])
    assert column_mean(read_records(baseline_dir / "arith.jsonl"), "exact_match") == pytest.approx(
        results["baseline_metrics"]["math/arith/exact_match"])
    stamp = (baseline_dir / "my_mc.jsonl").stat().st_mtime_ns

    again = point(0.4, tmp_path / "run2")  # same model and eval config: the baseline's records are not rewritten
    assert again["samples"]["baseline_dir"] == summary["baseline_dir"]
    assert (baseline_dir / "my_mc.jsonl").stat().st_mtime_ns == stamp
    assert len(read_records(tmp_path / "run2" / "samples" / "my_mc.jsonl")) == 4
