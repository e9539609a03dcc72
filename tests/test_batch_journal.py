"""The batch journal: a generation task cut between batches resumes at the batch it was in, reads the finished
batches back, and generates what an uninterrupted run generates, in bf16 too (the drafting planner's counts and
the shared-prefix cache are rebuilt as the finished batches left them)."""

from __future__ import annotations

import json

import pytest
import torch
from lm_eval.api.instance import Instance

from mathneuro.evaluation.decoding.batch_journal import BatchJournal, journaling
from mathneuro.evaluation.decoding.drafts import DraftStore, attach_draft_store
from mathneuro.evaluation.decoding.prefix_cache import PrefixCacheHFLM
from mathneuro.models.tiny import tiny_model

PREFIX = "Q: Ann has 3 cats and gets 2 more. How many cats?\nA: 3 + 2 = 5. The answer is 5.\n\n"
QUESTIONS = ["Q: Tom has 4 apples and eats one. How many are left over at the end of the day?\nA:", "Q: 7?\nA:",
             "Q: Lisa reads 12 pages a day.\nA:", "Q: x\nA:", "Q: What is 2 + 2, times three?\nA:",
             "Q: Bo runs 5 km each morning and 3 km each evening for 4 days; how far?\nA:",
             "Q: A train leaves at 3 and arrives at 5.\nA:", "Q: 9 - 4?\nA:"]
GEN = {"until": ["\n\n"], "max_gen_toks": 12, "do_sample": False}


class Cut(Exception):
    """What ends an attempt between two batches (a timeout, a preemption)."""


def _requests() -> list[Instance]:
    return [Instance("generate_until", {}, (PREFIX + q, dict(GEN)), i) for i, q in enumerate(QUESTIONS)]


@pytest.fixture(scope="module")
def drafted():
    """A bf16 tiny model whose draft store holds the answers of the model before an edit, then edited: its
    drafts are partly right, so the planner's counts move from batch to batch."""
    model, tok = tiny_model("llama")
    model = model.to(torch.bfloat16)
    store = DraftStore(None, {"model": "tiny"})
    attach_draft_store(model, store)
    with store.recording():
        PrefixCacheHFLM(pretrained=model, tokenizer=tok, batch_size=2, min_prefix_tokens=8).generate_until(
            _requests(), disable_tqdm=True)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("mlp.up_proj.weight"):
                param.mul_(1.3)
    return model, tok


def _wrapper(model, tok) -> PrefixCacheHFLM:
    return PrefixCacheHFLM(pretrained=model, tokenizer=tok, batch_size=2, min_prefix_tokens=8)


def test_a_generation_cut_between_batches_resumes_with_an_uninterrupted_runs_tokens(drafted, tmp_path):
    model, tok = drafted
    whole = _wrapper(model, tok)
    with journaling(model, tmp_path / "whole") as journal:
        expected = whole.generate_until(_requests(), disable_tqdm=True)
    batches = journal.written
    assert batches >= 3 and whole.prefix_stats.drafted_rows > 0  # several batches, drafted

    cut = _wrapper(model, tok)
    decode, calls = cut._decode_batch, []

    def decode_then_cut(*args, **kwargs):
        if len(calls) == 2:
            raise Cut
        calls.append(1)
        return decode(*args, **kwargs)

    cut._decode_batch = decode_then_cut
    with pytest.raises(Cut), journaling(model, tmp_path / "cut"):
        cut.generate_until(_requests(), disable_tqdm=True)
    assert len(list((tmp_path / "cut").glob("*.json"))) == 2

    again = _wrapper(model, tok)
    decode, decoded = again._decode_batch, []
    again._decode_batch = lambda *a, **k: decoded.append(1) or decode(*a, **k)
    with journaling(model, tmp_path / "cut") as journal:
        got = again.generate_until(_requests(), disable_tqdm=True)
    assert got == expected
    assert journal.reused == 2 and len(decoded) == batches - 2  # the two finished batches were not decoded again
    assert again._planner.counts == whole._planner.counts  # the planner learnt what the uninterrupted run learnt
    assert again._prefix_ids == whole._prefix_ids


def test_without_a_journal_nothing_is_kept_and_a_damaged_entry_is_decoded_again(drafted, tmp_path, caplog):
    model, tok = drafted
    plain = _wrapper(model, tok).generate_until(_requests(), disable_tqdm=True)
    assert not list(tmp_path.iterdir())
    with journaling(model, tmp_path / "j"):
        assert _wrapper(model, tok).generate_until(_requests(), disable_tqdm=True) == plain
    entry = sorted((tmp_path / "j").glob("*.json"))[0]
    data = json.loads(entry.read_text())
    data["tokens"][-1] += 1  # damaged on disk
    entry.write_text(json.dumps(data))
    with journaling(model, tmp_path / "j") as journal:
        assert _wrapper(model, tok).generate_until(_requests(), disable_tqdm=True) == plain
    assert "damaged or does not match" in caplog.text and journal.reused == len(list((tmp_path / "j").glob("*"))) - 1


def test_batches_are_keyed_by_their_content():
    journal = BatchJournal("unused")
    ctx, mask = torch.tensor([[1, 2, 3]]), torch.ones(1, 3, dtype=torch.long)
    key = journal.key(ctx, mask, 10, ["\n"], {"do_sample": False})
    assert key == journal.key(ctx.clone(), mask.clone(), 10, ["\n"], {"do_sample": False})
    assert len({key, journal.key(ctx + 1, mask, 10, ["\n"], {"do_sample": False}),
                journal.key(ctx, mask, 11, ["\n"], {"do_sample": False}),
                journal.key(ctx, mask, 10, ["\n\n"], {"do_sample": False}),
                journal.key(ctx, torch.zeros_like(mask), 10, ["\n"], {"do_sample": False})}) == 5
    assert journal.key(ctx, mask, 10, ["\n"], {"logits_processor": object()}) is None  # not kept


@pytest.mark.e2e
@pytest.mark.integration  # end to end through the runner and lm-eval
def test_a_point_cut_inside_a_generation_task_resumes_at_the_batch_it_was_in(tiny_dir, tmp_path, data_dir,
                                                                             monkeypatch):
    from omegaconf import OmegaConf

    from mathneuro.evaluation.samples import SAMPLES_DIR, read_records
    from mathneuro.pipeline import workbench
    from mathneuro.pipeline.attempts import PARTIAL_DIR
    from mathneuro.pipeline.runner import run_point
    from tests.lm_eval_tasks import write_zero_shot_task, zero_shot_overrides
    from tests.test_runner import base_overrides, compose_cfg

    folder = write_zero_shot_task(tmp_path / "user")

    def cfg(name: str):
        workbench._WORKBENCHES.clear()
        return OmegaConf.to_object(compose_cfg([
            *base_overrides(tiny_dir, tmp_path / name / "cache"), "logger=none", "eval=paper",
            f"eval.data_dir={data_dir}", "eval.limits={}", "eval.batch_size=2", "eval.bootstrap_iters=0",
            "eval.log_samples=true", "eval.continuous_batching=off", "top_k=0.2", "intervention=scale",
            "intervention.scalar=1.05", *zero_shot_overrides(folder), "eval.max_gen_toks=null"]))

    def responses(name: str) -> list[str]:
        path = tmp_path / name / "point" / SAMPLES_DIR / "my_zero_shot_math.jsonl"
        return [r["response"] for r in read_records(path)]

    whole = run_point(cfg("whole"), tmp_path / "whole" / "point")

    decode, calls = PrefixCacheHFLM._decode_batch, []

    def decode_then_cut(self, *args, **kwargs):
        calls.append(1)
        if len(calls) == 4:  # the baseline's two batches, then the edited model's first: cut in its second
            raise Cut
        return decode(self, *args, **kwargs)

    monkeypatch.setattr(PrefixCacheHFLM, "_decode_batch", decode_then_cut)
    with pytest.raises(Cut):
        run_point(cfg("cut"), tmp_path / "cut" / "point")
    kept = list((tmp_path / "cut" / "point" / PARTIAL_DIR).glob("edited-*/batches/*.json"))
    assert len(kept) == 1  # the edited model's first batch
    monkeypatch.setattr(PrefixCacheHFLM, "_decode_batch", decode)

    decoded = []
    monkeypatch.setattr(PrefixCacheHFLM, "_decode_batch",
                        lambda self, *a, **k: decoded.append(1) or decode(self, *a, **k))
    again = run_point(cfg("cut"), tmp_path / "cut" / "point")
    assert len(decoded) == 1  # the edited model's second batch (the baseline is cached)
    assert again["metrics"] == whole["metrics"] and responses("cut") == responses("whole")
    assert again["attempts"] == 2 and not (tmp_path / "cut" / "point" / PARTIAL_DIR).exists()


def test_batches_read_back_from_another_kind_of_machine_are_counted(tmp_path):
    out = torch.tensor([[1, 2, 3, 4]])
    BatchJournal(tmp_path, "AMD EPYC (avx512_bf16)").put("k1", out, {})
    BatchJournal(tmp_path, "Xeon (amx_bf16)").put("k2", out, {})
    BatchJournal(tmp_path).put("k3", out, {})  # nothing said where
    here = BatchJournal(tmp_path, "Xeon (amx_bf16)")
    assert all(torch.equal(here.get(k)[0], out) for k in ("k1", "k2", "k3"))
    assert here.reused == 3 and here.elsewhere == {"AMD EPYC (avx512_bf16)": 1, "an unrecorded machine": 1}
