"""A point cut short during evaluation resumes: the next attempt reads back the tasks the earlier one
finished (baseline and edited) instead of evaluating them again; an edited model's kept results are
never used for another edit; ``results.json`` counts the attempts and says what was read back."""

from __future__ import annotations

import hashlib
import json
import logging
import math
from collections import Counter

import pytest
import torch
from omegaconf import OmegaConf

from mathneuro.evaluation.probe_registry import register_probe
from mathneuro.evaluation.task_store import TaskStore
from mathneuro.methods.selection import Selection
from mathneuro.models.devices import machine_kind
from mathneuro.models.targets import base_model
from mathneuro.pipeline.attempts import (
    ATTEMPTS_FILE,
    PARTIAL_DIR,
    computed_elsewhere,
    edit_key,
    edit_payload,
    edited_store,
    payload_key,
    selection_digest,
    unreused_partials,
)
from mathneuro.pipeline.cluster import cluster_info
from mathneuro.pipeline.runner import run_point
from mathneuro.pipeline.workbench import get_workbench
from tests.test_runner import base_overrides, compose_cfg

pytestmark = pytest.mark.integration  # run_point end to end, files on disk

CALLS: Counter = Counter()
STOP_AT: dict[str, int] = {}  # probe -> the call (1-based, over the test) at which it is cut short


class Cut(Exception):
    """A stand-in for what ends an attempt (a timeout's SystemExit, a preemption)."""


def _probe(name: str):
    def probe(ctx):
        CALLS[name] += 1
        if STOP_AT.get(name) == CALLS[name]:
            raise Cut(name)
        weight = ctx.model.get_input_embeddings().weight
        zeros = sum(int((m.weight == 0).sum()) for n, m in ctx.model.named_modules() if n.endswith("up_proj"))
        return {"zeros": float(zeros), "norm": float(weight.float().norm())}

    return probe


first = register_probe("resume_first", kind="math", replace=True)(_probe("first"))
second = register_probe("resume_second", kind="nonmath", replace=True)(_probe("second"))
TASKS = "eval.tasks=[resume_first,resume_second]"


@pytest.fixture(autouse=True)
def _fresh_counts():
    CALLS.clear()
    STOP_AT.clear()
    yield


def point(tiny_dir, cache, *more):
    return OmegaConf.to_object(compose_cfg([*base_overrides(tiny_dir, cache), "logger=none", "eval=quick", TASKS,
                                            "top_k=0.2", *more]))


def test_a_point_cut_during_its_edited_evaluation_resumes_with_the_finished_tasks(tiny_dir, tmp_path):
    whole = run_point(point(tiny_dir, tmp_path / "ref-cache"), tmp_path / "reference")
    CALLS.clear()
    STOP_AT["second"] = 2  # baseline: first, second; edited: first, then cut in second
    out = tmp_path / "point"
    with pytest.raises(Cut):
        run_point(point(tiny_dir, tmp_path / "cache"), out)
    [kept] = list((out / PARTIAL_DIR).glob("edited-*/*.json"))
    assert json.loads(kept.read_text())["task"] == "resume_first"
    assert json.loads((out / ATTEMPTS_FILE).read_text())["attempts"][0]["pid"]
    assert not (out / "results.json").exists()

    res = run_point(point(tiny_dir, tmp_path / "cache"), out)
    assert CALLS == {"first": 2, "second": 3}  # the edit's first task was not evaluated again
    assert res["attempts"] == 2 and res["resumed"] == {"edited_tasks": ["resume_first"]}
    assert res["metrics"] == whole["metrics"] and res["baseline_metrics"] == whole["baseline_metrics"]
    assert not (out / PARTIAL_DIR).exists() and not (out / ATTEMPTS_FILE).exists()  # nothing partial left
    assert json.loads((out / "results.json").read_text())["attempts"] == 2


def test_a_point_cut_during_its_baseline_resumes_with_the_finished_baseline_tasks(tiny_dir, tmp_path):
    STOP_AT["second"] = 1  # cut in the baseline's second task
    cache, out = tmp_path / "cache", tmp_path / "point"
    with pytest.raises(Cut):
        run_point(point(tiny_dir, cache), out)
    assert len(list((cache / "statistics" / "baselines").glob("*.tasks/*.json"))) == 1
    res = run_point(point(tiny_dir, cache), out)
    assert CALLS == {"first": 2, "second": 3}  # baseline first read back; second, then the edit's two
    assert res["resumed"] == {"baseline_tasks": ["resume_first"]} and res["attempts"] == 2
    assert not list((cache / "statistics" / "baselines").glob("*.tasks"))  # the baseline is stored whole


def test_kept_results_of_one_edit_are_never_used_for_another(tiny_dir, tmp_path, caplog):
    STOP_AT["second"] = 2
    cache, out = tmp_path / "cache", tmp_path / "point"
    with pytest.raises(Cut):
        run_point(point(tiny_dir, cache), out)
    [kept] = list((out / PARTIAL_DIR).glob("edited-*/key.parts"))
    parts = json.loads(kept.read_text())
    assert parts["hardware"]["device"] == "cpu" and len(parts["parts"]["selection"]) == 64
    with caplog.at_level(logging.WARNING, logger="mathneuro"):
        res = run_point(point(tiny_dir, cache, "top_k=0.3"), out)  # another edit, same run directory
    assert CALLS == {"first": 3, "second": 3}  # its first task was evaluated, not read back
    assert "resumed" not in res and res["attempts"] == 2
    assert res["not_resumed"] == [{"tasks": ["resume_first"], "differ": ["the selection"],
                                   "computed_on": machine_kind(parts["hardware"])}]
    assert "1 finished task(s) kept by an earlier attempt (resume_first)" in caplog.text
    assert "the selection differ(s)" in caplog.text


def test_kept_results_computed_on_another_machine_type_say_why_they_are_evaluated_again(tmp_path):
    """bf16 statistics round differently on another kind of CPU: the selection recomputed there differs by a
    few entries, so the kept tasks do not match; the reason names both machines."""
    masks = {"a": torch.zeros(4, 6, dtype=torch.bool)}
    there = Selection(masks={"a": masks["a"].clone()})
    here = Selection(masks={"a": masks["a"].clone()})
    here.masks["a"][0, 0] = True
    kept_parts = edit_payload({"model": "x"}, "eval", [2], there, 0.0, True)
    kept_key = payload_key(kept_parts)
    store = edited_store(tmp_path, kept_key, payload=kept_parts, hardware={"device": "cpu", "device_name": "AMD EPYC"})
    store.save("gsm8k_cot", {"values": {"acc": 0.5}, "subtasks": {}, "samples": {}, "num_examples": 2, "seconds": 1})
    parts = edit_payload({"model": "x"}, "eval", [2], here, 0.0, True)
    key = payload_key(parts)
    assert key == edit_key({"model": "x"}, "eval", [2], here, 0.0, True) and key != kept_key
    [item] = unreused_partials(tmp_path, key, parts, {"device": "cpu", "device_name": "Intel Xeon"})
    assert item["tasks"] == ["gsm8k_cot"] and item["differ"] == ["the selection"]
    assert item["computed_on"] == "AMD EPYC"
    assert "this attempt runs on Intel Xeon" in item["reason"] and "bf16" in item["reason"]
    assert unreused_partials(tmp_path, kept_key, kept_parts, {"device_name": "AMD EPYC"}) == []  # its own key
    other_eval = edit_payload({"model": "x"}, "eval2", [2], there, 1.5, True)
    [item] = unreused_partials(tmp_path, payload_key(other_eval), other_eval, {"device_name": "AMD EPYC"})
    assert item["differ"] == ["the eval config", "the intervention's settings"] and "bf16" not in item["reason"]
    (store.folder / "key.parts").unlink()  # kept by a version that recorded no key parts
    [item] = unreused_partials(tmp_path, key, parts)
    assert item["differ"] == ["unknown (kept before key parts were recorded)"] and item["computed_on"] is None


def test_tasks_read_back_from_another_kind_of_machine_are_named_with_it(tmp_path):
    """A point resumed on another kind of machine, with the same edit key (its selection came out identical),
    reads the kept tasks back; results.json's ``hardware`` names this machine, so ``computed_elsewhere`` names
    the tasks that carry the other one's rounding. Tasks kept before stamps existed take the machine their
    folder's ``key.parts`` named."""
    epyc = {"device": "cpu", "device_name": "AMD EPYC", "cpu_flags": ["avx512_bf16", "avx512f", "avx2"]}
    xeon = {"device": "cpu", "device_name": "Intel(R) Xeon(R) Processor",
            "cpu_flags": ["amx_bf16", "avx512_bf16", "avx512f", "avx2"]}
    parts = edit_payload({"model": "x"}, "eval", [2], Selection(masks={"a": torch.ones(2, 2, dtype=torch.bool)}),
                         0.0, True)
    key = payload_key(parts)
    result = {"values": {"acc": 0.5}, "subtasks": {}, "samples": {}, "num_examples": 2, "seconds": 1}
    edited_store(tmp_path, key, payload=parts, hardware=epyc).save("race", result)
    TaskStore(edited_store(tmp_path, key).folder, key).save("mmlu", result)  # saved before stamps existed
    edited_store(tmp_path, key, payload=parts, hardware=xeon).save("piqa", result)  # a second attempt, on a Xeon

    store = edited_store(tmp_path, key, payload=parts, hardware=xeon)  # the third attempt, on a Xeon
    assert all(store.load(t) is not None for t in ("race", "mmlu", "piqa"))
    assert computed_elsewhere(store, xeon) == {"race": machine_kind(epyc)}  # mmlu: key.parts said the Xeon
    store = edited_store(tmp_path, key, payload=parts, hardware=epyc)  # a fourth, back on the EPYC
    assert all(store.load(t) is not None for t in ("race", "mmlu", "piqa"))
    assert computed_elsewhere(store, epyc) == {"mmlu": machine_kind(xeon), "piqa": machine_kind(xeon)}
    store = TaskStore(store.folder, key)  # nothing says where anything ran
    assert store.load("mmlu") is not None and computed_elsewhere(store, epyc) == {"mmlu": "an unrecorded machine"}


def test_a_damaged_kept_result_is_evaluated_again(tiny_dir, tmp_path, caplog):
    STOP_AT["second"] = 2
    cache, out = tmp_path / "cache", tmp_path / "point"
    with pytest.raises(Cut):
        run_point(point(tiny_dir, cache), out)
    [kept] = list((out / PARTIAL_DIR).glob("edited-*/*.json"))
    kept.write_text(kept.read_text()[:40])
    with caplog.at_level(logging.WARNING, logger="mathneuro"):
        res = run_point(point(tiny_dir, cache), out)
    assert "is damaged or does not match" in caplog.text
    assert CALLS == {"first": 3, "second": 3} and "resumed" not in res


def test_the_edit_key_covers_every_selected_weight_the_scalar_and_the_eval(tiny_dir):
    masks = {"a": torch.zeros(4, 6, dtype=torch.bool), "b": torch.ones(3, dtype=torch.bool)}
    base = Selection(masks=dict(masks), method="m")
    flipped = {**masks, "a": masks["a"].clone()}
    flipped["a"][2, 5] = True
    neurons = Selection(masks=dict(masks), neurons={"mlp": torch.tensor([1, 4])}, method="m")
    key = edit_key({"model": "x"}, "eval", [2], base, 0.0, False)
    assert selection_digest(base) == selection_digest(Selection(masks=dict(masks), method="other name"))
    others = [edit_key({"model": "y"}, "eval", [2], base, 0.0, False),
              edit_key({"model": "x"}, "eval2", [2], base, 0.0, False),
              edit_key({"model": "x"}, "eval", [2, 7], base, 0.0, False),
              edit_key({"model": "x"}, "eval", [2], Selection(masks=flipped), 0.0, False),
              edit_key({"model": "x"}, "eval", [2], neurons, 0.0, False),
              edit_key({"model": "x"}, "eval", [2], base, 1.5, False),
              edit_key({"model": "x"}, "eval", [2], base, 0.0, True)]
    assert len({key, *others}) == 1 + len(others)
    # the key is the one kept results were stored under before key.parts existed: they still resume
    before = {"model": {"model": "x"}, "eval": "eval", "generation_eos_ids": [2], "selection": selection_digest(base),
              "scalar": 0.0, "log_samples": False}
    assert key == hashlib.sha256(json.dumps(before, sort_keys=True).encode()).hexdigest()


def test_cluster_info_reads_slurms_job_and_array_ids():
    assert cluster_info({}) is None
    env = {"SLURM_JOB_ID": "17", "SLURM_ARRAY_JOB_ID": "15", "SLURM_ARRAY_TASK_ID": "2", "SLURM_RESTART_COUNT": "3",
           "SLURM_JOB_NAME": "mathneuro", "SLURM_JOB_PARTITION": "gpu", "SLURMD_NODENAME": "n1"}
    assert cluster_info(env) == {"scheduler": "slurm", "job_id": "17", "array_job_id": "15", "array_task_id": "2",
                                 "job_name": "mathneuro", "partition": "gpu", "node": "n1", "restart_count": 3}
    assert cluster_info({"SLURM_JOB_ID": "5"}) == {"scheduler": "slurm", "job_id": "5", "restart_count": 0}


def test_a_kept_task_result_reads_back_as_it_was_nan_included(tmp_path):
    store = TaskStore(tmp_path / "kept", "key-1")
    store.save("ppl", {"values": {"ppl": float("nan"), "acc": 0.25}, "subtasks": {"a": {"acc": float("nan")}},
                       "samples": {}, "num_examples": 4, "seconds": 1.5})
    kept = TaskStore(tmp_path / "kept", "key-1").load("ppl")
    assert kept["values"]["acc"] == 0.25
    assert math.isnan(kept["values"]["ppl"]) and math.isnan(kept["subtasks"]["a"]["acc"])
    assert TaskStore(tmp_path / "kept", "key-2").load("ppl") is None  # another evaluation's key: a miss
    assert TaskStore(tmp_path / "kept", "key-1").load("mc") is None


def test_a_statistics_pass_resumed_by_an_attempt_cut_before_its_selection_stays_on_the_record(tiny_dir, tmp_path):
    """Attempt 1 is cut in the math set's pass; attempt 2 resumes that pass from its checkpoint, finishes it
    and is cut in the filter set's pass, before any selection; attempt 3 completes the point. The record
    says that attempt 2 resumed the math set's statistics, though attempt 3 only read them from disk."""
    cache, out = tmp_path / "cache", tmp_path / "point"
    cfg = point(tiny_dir, cache, "num_samples=16", "checkpoint_every_s=0", "eval=none")
    forwards = Counter()

    def cut_when(ready):
        def pre_hook(_module, _args, _kwargs):
            forwards["n"] += 1
            if ready():
                raise Cut("statistics")
        return pre_hook

    model = get_workbench(cfg).model
    entries = cache / "statistics"
    for ready in (lambda: forwards["n"] == 3,  # after two of the math set's four batches were saved
                  lambda: any(entries.glob("*.json"))):  # the math set's entry is stored: the filter's pass
        forwards.clear()
        handle = base_model(model).register_forward_pre_hook(cut_when(ready), with_kwargs=True)
        try:
            with pytest.raises(Cut):
                run_point(cfg, out)
        finally:
            handle.remove()
    res = run_point(cfg, out)
    assert res["attempts"] == 3
    [resumed] = res["resumed"]["statistics"]
    assert resumed["dataset"] == cfg.task.name and resumed["attempt"] == 2 and resumed["resumed_batches"] == 2
