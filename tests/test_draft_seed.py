"""Drafts from recorded answers: a fresh cache gets the unedited model's drafts back from its per-example
records, keyed as a recorded baseline keys them, without a model pass; points then draft from them, exactly."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mathneuro.evaluation.decoding.draft_seed import recorded_answers
from mathneuro.pipeline import workbench
from mathneuro.pipeline.runner import run_point
from mathneuro.pipeline.stages import BASELINE_RECORDS
from tests.lm_eval_tasks import write_zero_shot_task, zero_shot_overrides
from tests.test_drafts import responses, sweep_cfg

pytestmark = pytest.mark.integration  # in-process, but end to end through lm-eval


def entries(cache) -> dict[str, list[int]]:
    """The draft store's entries on disk under ``cache``: key -> tokens."""
    found = {}
    for path in (cache / "statistics" / "baselines" / "drafts").rglob("*.json"):
        data = json.loads(path.read_text())
        found[data["key"]] = data["tokens"]
    return found


def baseline_records(sweep: Path) -> Path:
    (folder,) = (sweep / BASELINE_RECORDS).iterdir()
    return folder


@pytest.mark.parametrize("task", ["gsm8k_cot", "zero_shot_yaml"])
def test_a_fresh_cache_gets_the_recorded_baselines_drafts_back_and_points_draft_from_them(
        tiny_dir, tmp_path, data_dir, task):
    extra: tuple[str, ...] = ()
    if task == "zero_shot_yaml":  # a user's task outside our table, prompts sharing only "Problem: "
        extra = zero_shot_overrides(write_zero_shot_task(tmp_path / "user"))
    name = "my_zero_shot_math" if extra else "gsm8k_cot"
    first = tmp_path / "first"
    workbench._WORKBENCHES.clear()
    recorded = run_point(sweep_cfg(tiny_dir, first / "cache", data_dir, 1.1, *extra), first / "point")
    original = entries(first / "cache")
    assert original and recorded["drafting"]["requests_drafted"] == len(original)

    # a new machine: the records travelled with the point, the cache did not
    fresh = tmp_path / "fresh" / "cache"
    workbench._WORKBENCHES.clear()
    cfg = sweep_cfg(tiny_dir, fresh, data_dir, 1.1, *extra, "eval.baseline=false")
    bench = workbench.get_workbench(cfg)
    calls = []
    handle = bench.model.register_forward_hook(lambda *a: calls.append(1))
    seeded = bench.seed_drafts(cfg.eval, baseline_records(first / "point"))
    handle.remove()
    assert calls == []  # replayed, never decoded
    counts = seeded[name]
    assert counts.requests == counts.answered == counts.written == len(original) and counts.present == 0
    assert set(entries(fresh)) == set(original)  # keyed exactly as recording keys them
    baseline_metrics = {k.split("/", 1)[1]: v for k, v in recorded["baseline_metrics"].items()
                        if not k.endswith("_stderr")}
    replayed = {f"{name}/{k}": v for k, v in counts.metrics.items() if not k.endswith("_stderr")}
    assert {k: v for k, v in baseline_metrics.items() if k in replayed} == replayed and replayed
    tokenizer = bench.tokenizer
    for key, tokens in entries(fresh).items():  # the recorded text, re-tokenised: the same text
        assert tokenizer.decode(tokens) == tokenizer.decode(original[key])[:len(tokenizer.decode(tokens))]

    again = bench.seed_drafts(cfg.eval, baseline_records(first / "point"))[name]
    assert again.written == 0 and again.present == len(original)  # a second replay rewrites nothing

    point = run_point(cfg, tmp_path / "fresh" / "point")  # no baseline evaluated: the drafts came from records
    assert point["drafting"]["requests_drafted"] == len(original) and bench.draft_store().recorded == len(original)
    plain = run_point(sweep_cfg(tiny_dir, tmp_path / "plain" / "cache", data_dir, 1.1, *extra, "eval.baseline=false",
                                "eval.draft=none", "eval.prompt_lookup=off"), tmp_path / "plain" / "point")
    assert point["metrics"] == recorded["metrics"] == plain["metrics"]
    if name == "gsm8k_cot":
        assert responses(tmp_path / "fresh" / "point") == responses(tmp_path / "plain" / "point")


def test_recorded_answers_reads_every_generated_answer_and_refuses_an_empty_folder(tmp_path):
    (tmp_path / "a.jsonl").write_text(json.dumps({"doc_id": 0, "prompt_hash": "p0", "response": " 7"}) + "\n"
                                      + json.dumps({"doc_id": 1, "prompt_hash": "p1", "acc": 1.0}) + "\n")
    assert recorded_answers(tmp_path) == {"p0": " 7"}
    with pytest.raises(FileNotFoundError, match="no per-example records"):
        recorded_answers(tmp_path / "nothing")
