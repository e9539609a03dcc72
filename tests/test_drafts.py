"""Drafts: lookup in the unedited model's answer, the planner's draft lengths, the draft store on disk, and a
sweep whose points evaluate from the baseline's drafts (recorded in results.json)."""

from __future__ import annotations

import json
import logging
import shutil

import pytest
import torch
from omegaconf import OmegaConf

from mathneuro.evaluation import EvalConfig
from mathneuro.evaluation.decoding.draft_lookup import DraftPlanner, RowDraft
from mathneuro.evaluation.decoding.drafts import DraftStore, baseline_needs_drafts, may_generate, request_key
from mathneuro.evaluation.decoding.greedy_search import prompt_lookup_on
from mathneuro.evaluation.samples import SAMPLES_DIR, read_records
from mathneuro.models.tiny import tiny_model
from mathneuro.pipeline import workbench
from mathneuro.pipeline.runner import run_point
from mathneuro.pipeline.workbench import Workbench
from tests.lm_eval_tasks import write_zero_shot_task, zero_shot_overrides
from tests.test_runner import base_overrides, compose_cfg

# ---------------------------------------------------------------------------------------------- lookup

ANSWER = [10, 11, 12, 13, 14, 15, 11, 12, 16, 17]


def test_a_row_proposes_its_draft_from_the_start_and_follows_it_while_it_agrees():
    row = RowDraft(ANSWER)
    assert row.kind == "start" and row.proposal(4) == [10, 11, 12, 13]
    generated = [10, 11, 12]  # two proposals accepted, then the model's own 12 (the draft's next): aligned
    row.advance(generated, proposed=2, accepted=2)
    assert row.proposal(3) == [13, 14, 15] and row.available() == 7
    generated += [13, 14, 15, 11]
    row.advance(generated, proposed=3, accepted=3)
    assert row.kind == "aligned" and row.proposal(2) == [12, 16]


def test_after_a_departure_the_longest_generated_suffix_found_in_the_draft_re_anchors_it():
    row = RowDraft(ANSWER)
    generated = [10, 99]  # the first proposal accepted, then a token the draft does not have
    row.advance(generated, proposed=3, accepted=1)
    assert row.pos is None and row.proposal(3) == [] and row.available() == 0
    generated += [14]  # a one-token match: the draft goes on after its 14
    row.advance(generated, proposed=0, accepted=0)
    assert row.kind == "ngram1" and row.proposal(2) == [15, 11]
    generated += [77]
    row.advance(generated, proposed=2, accepted=0)
    assert row.pos is None
    generated += [11]  # 11 occurs twice; the occurrence nearest to where the row was (after 14) wins
    row.advance(generated, proposed=0, accepted=0)
    assert row.kind == "ngram1" and row.proposal(2) == [12, 16]
    generated += [12]  # the model agrees again: two tokens of support now
    row.advance(generated, proposed=0, accepted=0)
    assert row.kind == "ngram2" and row.proposal(2) == [16, 17]
    early = RowDraft(ANSWER)
    early.advance([11, 12], proposed=1, accepted=0)  # near the start: the first (11, 12)
    assert early.proposal(2) == [13, 14]


def test_a_row_that_repeats_itself_proposes_its_next_laps():
    row = RowDraft(ANSWER)
    generated = [10, 50]  # departs from the draft at its second token, into a loop the draft does not have
    row.advance(generated, proposed=4, accepted=1)
    assert row.pos is None
    generated += [51, 52, 50]  # (50,) occurred before, followed by 51, 52, 50
    row.advance(generated, proposed=0, accepted=0)
    assert row.source is generated and row.proposal(7) == [51, 52, 50, 51, 52, 50, 51]
    generated += [51, 52, 50, 51, 52, 50, 51, 52]  # all 7 accepted, then the model's own 52: still the loop
    row.advance(generated, proposed=7, accepted=7)
    assert row.kind == "aligned" and row.proposal(4) == [50, 51, 52, 50]
    generated += [50, 51, 52, 99]  # the loop ends: 99 is nowhere
    row.advance(generated, proposed=4, accepted=3)
    assert row.pos is None and row.available() == 0


def test_the_draft_wins_a_lookup_tie_with_the_rows_own_tokens():
    row = RowDraft(ANSWER)
    generated = [14, 60, 14]  # (14,) occurs in the draft (then 15) and earlier in the row (then 60)
    row.advance(generated, proposed=3, accepted=0)
    assert row.source is row.answer and row.proposal(2) == [15, 11]
    generated += [61, 60]  # (60,) only in the row's own tokens (then 14, 61)
    row.advance(generated, proposed=2, accepted=0)
    assert row.source is generated and row.proposal(2) == [14, 61]


def test_a_draft_that_ends_proposes_nothing_more():
    row = RowDraft([5, 6])
    row.advance([5, 6], proposed=1, accepted=1)
    assert row.available() == 0 and row.proposal(4) == []
    assert RowDraft([]).proposal(3) == [] and RowDraft([]).kind is None


def test_a_row_without_a_draft_looks_up_its_prompt_after_its_own_tokens():
    prompt = [1, 20, 21, 22, 23, 5, 20, 30, 31]  # (20,) occurs twice: the latest occurrence (then 30) wins
    row = RowDraft([], context=prompt)
    assert row.pos is None and row.kind is None and row.proposal(3) == [] and row.available() == 0
    generated = [20]
    row.advance(generated, proposed=0, accepted=0)
    assert row.source is row.context and row.proposal(3) == [30, 31] and row.available() == 2
    generated += [21, 22]  # the model's own 21, 22 (not the 30 proposed): (20, 21, 22) is in the prompt, then 23
    row.advance(generated, proposed=2, accepted=0)
    assert row.kind == "ngram3" and row.proposal(3) == [23, 5, 20]
    generated += [23, 5, 20, 30, 31, 7]  # 5 proposed, 5 accepted, then the model's own 7 (the prompt has 31 last)
    row.advance(generated, proposed=5, accepted=5)
    assert row.pos is None  # 7 occurs nowhere
    generated += [20, 21]  # (20, 21): once in the prompt (then 22) and once in the row (then 22, 23) ...
    row.advance(generated, proposed=0, accepted=0)
    assert row.source is generated and row.proposal(4) == [22, 23, 5, 20]  # ... the row's own tokens win the tie
    generated += [99, 1, 20, 21]  # (1, 20, 21): only in the prompt; a longer match beats the row's (20, 21)
    row.advance(generated, proposed=0, accepted=0)
    assert row.source is row.context and row.kind == "ngram3" and row.proposal(2) == [22, 23]
    with_answer = RowDraft([40, 41], context=[5, 6, 7])  # the answer first; the prompt after a departure
    with_answer.advance([40, 6], proposed=2, accepted=1)
    assert with_answer.source is with_answer.context and with_answer.proposal(2) == [7]


def test_prompt_lookup_is_on_by_default_in_float32_and_an_option_in_bf16():
    model, _ = tiny_model("llama")
    assert prompt_lookup_on(model, "auto") and not prompt_lookup_on(model, "off")
    assert not prompt_lookup_on(model, "auto", mixed_precision=torch.bfloat16)  # autocast: not float32 arithmetic
    model.to(torch.bfloat16)
    assert not prompt_lookup_on(model, "auto") and prompt_lookup_on(model, "on")
    with pytest.raises(ValueError, match="eval.prompt_lookup: unknown value 'yes'; allowed: auto, on, off"):
        EvalConfig(tasks=["arith"], prompt_lookup="yes").validate()
    assert EvalConfig(tasks=["arith"]).fingerprint() == EvalConfig(tasks=["arith"], prompt_lookup="on").fingerprint()


def test_fixed_draft_tokens_verify_the_whole_draft_first_then_lookups_of_that_length():
    planner = DraftPlanner(token_cost=1 / 16, fixed=3, max_pass_tokens=1000)
    assert planner.plan([("start", 40), ("ngram2", 10), (None, 0)], base_width=20, room=1 << 30) == [40, 3, 0]
    assert planner.plan([("start", 40)], base_width=20, room=5) == [5]  # a sliding window's room
    assert DraftPlanner(1 / 16, fixed=3, max_pass_tokens=40).plan([("start", 40), ("start", 40)], 1, 99) == [19, 19]


def test_the_adaptive_planner_drafts_longer_where_drafts_are_accepted_and_tokens_are_cheap():
    rows = [("aligned", 200)] * 8
    cheap, dear = DraftPlanner(token_cost=1 / 256), DraftPlanner(token_cost=1 / 4)
    assert cheap.plan(rows, 1, 1 << 30)[0] > dear.plan(rows, 1, 1 << 30)[0] >= 0
    learnt = DraftPlanner(token_cost=1 / 64)
    before = learnt.plan(rows, 1, 1 << 30)[0]
    for _ in range(20):
        learnt.observe("aligned", proposed=before, accepted=before)  # every proposal accepted whole
    assert learnt.plan(rows, 1, 1 << 30)[0] > before
    for _ in range(50):
        learnt.observe("ngram1", proposed=4, accepted=0)
    assert learnt.plan([("ngram1", 50)] * 8, 1, 1 << 30) == [0] * 8  # lookups that always miss: not drafted
    assert learnt.expected(None, 5) == 0.0 and learnt.plan([(None, 0)] * 2, 1, 99) == [0, 0]


# ----------------------------------------------------------------------------------------------- store

SETTINGS = {"until": ["Q:"], "max_gen_toks": 8, "eos": [2]}


def test_entries_are_keyed_by_model_context_and_settings_and_shared_through_disk(tmp_path):
    store = DraftStore(tmp_path, {"model": "a"}, vocab_size=100)
    store.put([1, 2, 3], SETTINGS, [7, 8, 9])
    again = DraftStore(tmp_path, {"model": "a"}, vocab_size=100)  # another process
    assert again.get([1, 2, 3], SETTINGS) == [7, 8, 9]
    assert again.get([1, 2, 4], SETTINGS) is None
    assert again.get([1, 2, 3], {**SETTINGS, "max_gen_toks": 9}) is None
    assert DraftStore(tmp_path, {"model": "b"}).get([1, 2, 3], SETTINGS) is None
    assert request_key("m", [1, 2], SETTINGS) != request_key("m", [1, 2], {**SETTINGS, "until": ["\n"]})
    assert DraftStore(None, "m").get([1], SETTINGS) is None  # memory only


@pytest.mark.parametrize("damage", ["truncated", "checksum", "vocabulary", "another request's"])
def test_a_damaged_entry_is_a_miss_with_one_warning(tmp_path, caplog, damage):
    store = DraftStore(tmp_path, "m", vocab_size=100)
    store.put([1, 2, 3], SETTINGS, [7, 8, 9])
    store.put([4, 5], SETTINGS, [1])
    (path,) = [p for p in tmp_path.rglob("*.json") if store.key([1, 2, 3], SETTINGS) in p.name]
    data = json.loads(path.read_text())
    if damage == "truncated":
        path.write_text(path.read_text()[:20])
    elif damage == "checksum":
        path.write_text(json.dumps({**data, "tokens": [7, 8, 10]}))
    elif damage == "vocabulary":
        path.write_text(json.dumps({**data, "tokens": [7, 8, 900]}))
    else:
        (other,) = [p for p in tmp_path.rglob("*.json") if p != path]
        path.write_text(other.read_text())
    fresh = DraftStore(tmp_path, "m", vocab_size=100)
    with caplog.at_level(logging.WARNING, logger="mathneuro"):
        assert fresh.get([1, 2, 3], SETTINGS) is None and fresh.get([1, 2, 3], SETTINGS) is None
    assert len([r for r in caplog.records if "drafts cache" in r.getMessage()]) == 1
    assert fresh.get([4, 5], SETTINGS) == [1]  # the others are fine
    fresh.put([1, 2, 3], SETTINGS, [7, 8, 9])  # recording it again heals it
    assert DraftStore(tmp_path, "m", vocab_size=100).get([1, 2, 3], SETTINGS) == [7, 8, 9]


def test_which_evaluations_draft(tmp_path):
    gen = EvalConfig(tasks=["gsm8k_cot", "mmlu"])
    assert may_generate(gen) and may_generate(EvalConfig(tasks=["gsm8k_gen"]))
    assert not may_generate(EvalConfig(tasks=["arith", "mc", "race", "mmlu"]))
    assert not may_generate(EvalConfig(tasks=["gsm8k_cot"], draft="none"))
    assert not may_generate(EvalConfig(tasks=["gsm8k_cot"], prefix_cache=False))
    old, new = tmp_path / "old.json", tmp_path / "new.json"
    old.write_text(json.dumps({"metrics": {"m": 1.0}}))
    new.write_text(json.dumps({"metrics": {"m": 1.0}, "drafts": {"recorded": 3}}))
    assert baseline_needs_drafts(gen, old) and not baseline_needs_drafts(gen, new)
    assert not baseline_needs_drafts(EvalConfig(tasks=["mmlu"]), old)


def test_draft_settings_are_validated_and_leave_the_baseline_key_alone():
    with pytest.raises(ValueError, match="eval.draft: unknown value 'always'; allowed: baseline, none"):
        EvalConfig(tasks=["arith"], draft="always").validate()
    with pytest.raises(ValueError, match="eval.draft_tokens"):
        EvalConfig(tasks=["arith"], draft_tokens=0).validate()
    assert EvalConfig(tasks=["arith"]).fingerprint() == EvalConfig(tasks=["arith"], draft="none",
                                                                   draft_tokens=4).fingerprint()


# ----------------------------------------------------------------------------------- a sweep, twice


def sweep_cfg(tiny_dir, cache, data_dir, scalar: float, *extra: str):
    return OmegaConf.to_object(compose_cfg([
        *base_overrides(tiny_dir, cache), "logger=none", "eval=paper", "eval.tasks=[gsm8k_cot]",
        f"eval.data_dir={data_dir}", "eval.limits={}", "eval.limit=3", "eval.num_fewshot=1", "eval.max_gen_toks=12",
        "eval.batch_size=4", "eval.bootstrap_iters=0", "eval.log_samples=true", "top_k=0.2", "intervention=scale",
        f"intervention.scalar={scalar}", *extra]))


def run_sweep(tiny_dir, cache, data_dir, out, scalars, *extra: str) -> tuple[list[dict], Workbench]:
    """One selection over ``scalars``, one point each, in a fresh workbench (as a new process would)."""
    workbench._WORKBENCHES.clear()
    results = [run_point(sweep_cfg(tiny_dir, cache, data_dir, s, *extra), out / f"s{s}") for s in scalars]
    return results, workbench.get_workbench(sweep_cfg(tiny_dir, cache, data_dir, scalars[0], *extra))


def responses(point_dir) -> list[str]:
    """The edited model's generated text per question of a point (its eval.log_samples records)."""
    return [r["response"] for r in read_records(point_dir / SAMPLES_DIR / "gsm8k_cot.jsonl")]


@pytest.mark.e2e
@pytest.mark.integration  # in-process, but end to end through the runner and lm-eval
def test_a_sweep_run_twice_evaluates_its_second_run_from_the_stored_drafts(tiny_dir, tmp_path, data_dir):
    scalars = [1.01, 1.1, 1.5]  # one selection (MathNeuro, K = 20 %), three scalars
    cache = tmp_path / "cache"
    first, bench = run_sweep(tiny_dir, cache, data_dir, tmp_path / "first", scalars)
    assert bench.draft_store().recorded == 3  # the baseline's answers to the 3 questions
    assert len(list((cache / "statistics" / "baselines" / "drafts").rglob("*.json"))) == 3
    second, bench = run_sweep(tiny_dir, cache, data_dir, tmp_path / "second", scalars)
    assert bench.draft_store().recorded == 0  # the baseline was read, not evaluated again
    plain, _ = run_sweep(tiny_dir, cache, data_dir, tmp_path / "plain", scalars, "eval.draft=none",
                         "eval.prompt_lookup=off")
    for s, undrafted, before, after in zip(scalars, plain, first, second, strict=True):
        drafting = json.loads((tmp_path / "second" / f"s{s}" / "results.json").read_text())["drafting"]
        assert drafting["requests"] == drafting["requests_drafted"] == 3
        assert drafting["tokens_drafted"] > 0 and 0 <= drafting["tokens_accepted"] <= drafting["tokens_drafted"]
        assert undrafted["drafting"]["requests_drafted"] == undrafted["drafting"]["tokens_drafted"] == 0
        # drafted decoding is exact: the same texts and metrics as greedy decoding without drafts
        assert after["metrics"] == before["metrics"] == undrafted["metrics"]
        assert after["baseline_metrics"] == before["baseline_metrics"] == undrafted["baseline_metrics"]
        assert responses(tmp_path / "second" / f"s{s}") == responses(tmp_path / "plain" / f"s{s}")
        assert drafting["tokens_generated"] == undrafted["drafting"]["tokens_generated"]
    near = second[0]["drafting"]  # s = 1.01: answers close to the baseline's, so fewer passes than tokens
    assert near["tokens_accepted"] > 0 and near["passes"] < near["tokens_generated"]
    assert sum(r["drafting"]["tokens_accepted"] for r in second) > 0


@pytest.mark.integration  # in-process, but end to end through the runner and lm-eval
def test_a_baseline_cached_before_drafts_is_evaluated_again_once_to_record_them(tiny_dir, tmp_path, data_dir):
    cache = tmp_path / "cache"
    run_sweep(tiny_dir, cache, data_dir, tmp_path / "first", [1.1])
    (entry,) = (cache / "statistics" / "baselines").glob("*.json")
    data = json.loads(entry.read_text())
    entry.write_text(json.dumps({k: v for k, v in data.items() if k != "drafts"}))  # as written before drafts
    for path in (cache / "statistics" / "baselines" / "drafts").rglob("*.json"):
        path.unlink()
    (result,), bench = run_sweep(tiny_dir, cache, data_dir, tmp_path / "again", [1.1])
    assert bench.draft_store().recorded == 3 and json.loads(entry.read_text())["drafts"] == {"recorded": 3}
    assert result["baseline_metrics"] == data["metrics"] and result["drafting"]["requests_drafted"] == 3
    (_, bench) = run_sweep(tiny_dir, cache, data_dir, tmp_path / "third", [1.2])
    assert bench.draft_store().recorded == 0  # now it has them: read, not evaluated


CHAT_TEMPLATE = ("{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}<|end|>{% endfor %}"
                 "{% if add_generation_prompt %}<|assistant|>{% endif %}")


@pytest.mark.integration  # in-process, but end to end through the runner and lm-eval
@pytest.mark.parametrize("chat", [False, True], ids=["plain", "chat-template"])
def test_a_users_zero_shot_yaml_task_drafts_and_results_json_counts_it(tiny_dir, tmp_path, data_dir, chat):
    extra = (*zero_shot_overrides(write_zero_shot_task(tmp_path / "user")), "eval.max_gen_toks=null",
             f"eval.apply_chat_template={chat}")
    if chat:  # the tiny model with a chat template: every prompt is wrapped in "<|user|>...<|end|><|assistant|>"
        shutil.copytree(tiny_dir, tmp_path / "chat-model")
        tiny_dir = tmp_path / "chat-model"
        config = json.loads((tiny_dir / "tokenizer_config.json").read_text())
        (tiny_dir / "tokenizer_config.json").write_text(json.dumps({**config, "chat_template": CHAT_TEMPLATE}))

    def run(name: str, *more: str) -> dict:
        workbench._WORKBENCHES.clear()
        cfg = OmegaConf.to_object(compose_cfg([
            *base_overrides(tiny_dir, tmp_path / name / "cache"), "logger=none", "eval=paper",
            f"eval.data_dir={data_dir}", "eval.limits={}", "eval.batch_size=4", "eval.bootstrap_iters=0",
            "eval.log_samples=true", "top_k=0.2", "intervention=scale", "intervention.scalar=1.01", *extra, *more]))
        result = run_point(cfg, tmp_path / name / "point")
        records = read_records(tmp_path / name / "point" / SAMPLES_DIR / "my_zero_shot_math.jsonl")
        result["responses"] = [r["response"] for r in records]
        return result

    drafted = run("drafted")  # the baseline's answers are recorded, then the edited point drafts from them
    plain = run("plain", "eval.draft=none", "eval.prompt_lookup=off")
    counts = drafted["drafting"]
    assert counts["requests"] == counts["requests_drafted"] == 4  # zero-shot batches draft too
    assert 0 < counts["tokens_accepted"] <= counts["tokens_drafted"] and counts["passes"] < counts["tokens_generated"]
    assert plain["drafting"]["requests"] == 4 and plain["drafting"]["tokens_drafted"] == 0
    assert drafted["responses"] == plain["responses"] and len(drafted["responses"]) == 4
    assert drafted["metrics"] == plain["metrics"] and drafted["baseline_metrics"] == plain["baseline_metrics"]
