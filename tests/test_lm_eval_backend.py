"""lm-eval's ``mathneuro-hf`` backend: registered by ``import mathneuro``, built from ``model_args`` strings, and in
float32 it answers every request as lm-eval's ``hf`` does (a tiny saved model, a local few-shot generation task)."""

from __future__ import annotations

import json
import string
import subprocess
import sys
import textwrap

import lm_eval
import pytest
import torch
from lm_eval.api.registry import get_model
from lm_eval.tasks import TaskManager

import mathneuro  # noqa: F401  registers mathneuro-hf
from mathneuro.evaluation.decoding.backend import MathneuroHFLM, engine_options
from mathneuro.evaluation.decoding.batch_journal import attach_batch_journal, batch_journal_of
from mathneuro.evaluation.decoding.drafts import attach_draft_store, draft_store_of
from mathneuro.models.tiny import tiny_model
from tests.conftest import save_checkpoint
from tests.lm_eval_tasks import generation_task

QUESTIONS = [("Ann has 3 cats and gets 2 more. How many?", "5"), ("Tom has 9 pens and loses 4. How many?", "5"),
             ("What is 6 + 7?", "13"), ("Bo buys 2 bags of 5 eggs. Eggs?", "10"), ("What is 8 - 3?", "5"),
             ("A box holds 4 rows of 3 cups. Cups?", "12"), ("What is 2 + 2?", "4"), ("What is 10 - 1?", "9")]

@pytest.fixture(scope="module")
def varied_dir(tmp_path_factory):
    """A tiny random qwen2 saved as a checkpoint, whose greedy answers differ from question to question: weights
    scaled up (sharper, input-dependent logits) and only printable ASCII bytes in its output layer."""
    model, tok = tiny_model("qwen2", seed=1)
    printable = [i for i in range(len(tok)) if len(tok.decode([i])) == 1 and tok.decode([i]) in string.printable]
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() > 1:
                p.mul_(4.0)
        silent = torch.ones(model.lm_head.weight.shape[0], dtype=torch.bool)
        silent[printable] = False
        model.lm_head.weight[silent] = 0.0
    return save_checkpoint(model, tok, tmp_path_factory.mktemp("tiny-qwen2"))


@pytest.fixture(scope="module")
def task_folder(tmp_path_factory):
    """A local lm-eval task: 2-shot generation over 6 test questions (2 exemplars in its train split)."""
    folder = tmp_path_factory.mktemp("tiny-task")
    for split, rows in (("train", QUESTIONS[6:]), ("test", QUESTIONS[:6])):
        (folder / f"{split}.jsonl").write_text("".join(json.dumps({"question": q, "answer": a}) + "\n"
                                                       for q, a in rows))
    (folder / "tiny_fewshot_gen.yaml").write_text(generation_task(
        "tiny_fewshot_gen", {"train": folder / "train.jsonl", "test": folder / "test.jsonl"}, num_fewshot=2,
        doc_to_text="Q: {{question}}\nA:", doc_to_target=" {{answer}}", until=["\n", "Q:"], max_gen_toks=8))
    return folder


def _evaluate(model, model_args: str, task_folder) -> dict:
    return lm_eval.simple_evaluate(model=model, model_args=model_args, tasks=["tiny_fewshot_gen"], device="cpu",
                                   batch_size=4, task_manager=TaskManager(include_path=str(task_folder),
                                                                          include_defaults=False),
                                   log_samples=True, bootstrap_iters=0)


def _answers(results: dict) -> list[tuple[int, list, list]]:
    return sorted((s["doc_id"], s["resps"], s["filtered_resps"]) for s in results["samples"]["tiny_fewshot_gen"])


def test_registered_by_import_and_built_from_model_args(varied_dir):
    assert get_model("mathneuro-hf") is MathneuroHFLM
    assert get_model("hf").__name__ == "HFLM"  # lm-eval's own backends are still found
    lm = get_model("mathneuro-hf").create_from_arg_string(
        f"pretrained={varied_dir},dtype=float32,min_prefix_tokens=8,draft_tokens=none,prompt_lookup=off",
        {"batch_size": 4, "device": "cpu"})
    assert lm.prefix_cache and lm.min_prefix_tokens == 8 and lm.draft_tokens is None and not lm.prompt_lookup
    assert lm.continuous_batching  # auto: on in float32
    assert lm.batch_size == 4 and str(lm.device) == "cpu"


def test_mathneuro_hf_answers_as_hf_in_float32(varied_dir, task_folder):
    args = f"pretrained={varied_dir},dtype=float32"
    plain = _evaluate("hf", args, task_folder)
    fast = _evaluate("mathneuro-hf", args, task_folder)
    assert len(_answers(plain)) == 6 and len({a[2][0] for a in _answers(plain)}) >= 4  # not one answer for all
    assert _answers(fast) == _answers(plain)
    assert fast["results"]["tiny_fewshot_gen"] == plain["results"]["tiny_fewshot_gen"]
    # the engine did run: the same object, built from the same string, reports its shared-prefix batches
    lm = get_model("mathneuro-hf").create_from_arg_string(args, {"batch_size": 4, "device": "cpu"})
    again = _evaluate(lm, None, task_folder)
    assert _answers(again) == _answers(plain)
    assert lm.prefix_stats.cached_batches >= 1 and lm.prefix_stats.prefix_tokens_skipped > 0


def test_prefix_cache_off_takes_hf_s_path_and_options_fail_naming_the_key(varied_dir, task_folder, tmp_path):
    lm = get_model("mathneuro-hf").create_from_arg_string(f"pretrained={varied_dir},dtype=float32,prefix_cache=false",
                                                          {"batch_size": 4, "device": "cpu"})
    plain = _evaluate("hf", f"pretrained={varied_dir},dtype=float32", task_folder)
    assert _answers(_evaluate(lm, None, task_folder)) == _answers(plain)
    assert lm.prefix_stats.batches == 0  # the engine never saw a batch
    with pytest.raises(ValueError, match="continuous_batching: unknown value 'sometimes'"):
        engine_options(continuous_batching="sometimes")
    with pytest.raises(ValueError, match="min_prefix_tokens"):
        engine_options(min_prefix_tokens=0)
    with pytest.raises(ValueError, match="record_drafts: needs drafts"):
        engine_options(record_drafts=True)
    assert engine_options(draft=None, prompt_lookup=False)["draft"] == "none"


def test_drafts_and_journal_folders_attach_to_the_model(varied_dir, task_folder, tmp_path):
    args = f"pretrained={varied_dir},dtype=float32,drafts={tmp_path / 'drafts'},record_drafts=true"
    recorder = get_model("mathneuro-hf").create_from_arg_string(args, {"batch_size": 4, "device": "cpu"})
    first = _answers(_evaluate(recorder, None, task_folder))
    assert draft_store_of(recorder.model).recorded == 6  # every greedy answer kept as a draft
    args = f"pretrained={varied_dir},dtype=float32,drafts={tmp_path / 'drafts'},journal={tmp_path / 'journal'}"
    drafted = get_model("mathneuro-hf").create_from_arg_string(args, {"batch_size": 4, "device": "cpu"})
    assert _answers(_evaluate(drafted, None, task_folder)) == first
    assert drafted.prefix_stats.drafted_rows == 6  # each request decoded from the recorded answer
    assert batch_journal_of(drafted.model).written >= 1 and any((tmp_path / "journal").iterdir())
    attach_batch_journal(drafted.model, None)
    attach_draft_store(drafted.model, None)


@pytest.mark.integration
def test_import_mathneuro_stays_light_and_registers_on_lm_eval_s_import():
    code = textwrap.dedent("""
        import sys
        import mathneuro
        assert "lm_eval" not in sys.modules and "torch" not in sys.modules, "import mathneuro got heavy"
        from lm_eval.api.registry import get_model
        assert get_model("mathneuro-hf").__name__ == "MathneuroHFLM"
        assert get_model("hf").__name__ == "HFLM"
        print("ok")
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "ok"


@pytest.mark.e2e
@pytest.mark.integration
def test_lm_eval_s_command_line_runs_mathneuro_hf(varied_dir, task_folder):
    done = subprocess.run([sys.executable, "-m", "mathneuro.evaluation.lm_eval_cli", "run", "--model", "mathneuro-hf",
                           "--model_args", f"pretrained={varied_dir},dtype=float32", "--tasks", "tiny_fewshot_gen",
                           "--include_path", str(task_folder), "--device", "cpu", "--batch_size", "4", "--limit", "2"],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "mathneuro-hf" in done.stdout and "tiny_fewshot_gen" in done.stdout and "exact_match" in done.stdout
