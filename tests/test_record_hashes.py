"""lm-eval tasks' per-example records carry document and prompt hashes, targets and multiple-choice answers
by their text; each task's lm-eval version, n-shot and metric directions reach the evaluator."""

from __future__ import annotations

import re

import pytest

from mathneuro.evaluation import EvalConfig, Evaluator
from mathneuro.models.tiny import tiny_model

pytestmark = pytest.mark.integration  # lm-evaluation-harness


def test_harness_records_hashes_targets_and_task_provenance(data_dir):
    model, tok = tiny_model("llama")
    cfg = EvalConfig(name="t", tasks=["piqa", "gsm8k_cot"], data_dir=str(data_dir), limit=2, batch_size=4,
                     max_gen_toks=4, bootstrap_iters=10, log_samples=True, num_fewshot=1)
    cfg.limits.pop("gsm8k_cot")
    ev = Evaluator(model, tok, cfg)
    ev.evaluate()
    piqa, gsm = ev.last_samples["piqa"], ev.last_samples["gsm8k_cot"]
    for record in (*piqa, *gsm):
        assert re.fullmatch(r"[0-9a-f]{64}", record["doc_hash"]) and re.fullmatch(r"[0-9a-f]{64}",
                                                                                  record["prompt_hash"])
    assert len({r["prompt_hash"] for r in piqa}) == len(piqa)  # one prompt per question
    for record in piqa:  # multiple choice: the chosen and the right solution by their text
        assert isinstance(record["target"], str) and len(record["target"]) > 1 and not record["target"].isdigit()
        assert isinstance(record["answer"], str) and record["acc"] == float(record["answer"] == record["target"])
    assert all(isinstance(r["target"], str) for r in gsm)
    info = ev.last_task_info
    assert info["piqa"]["n_shot"] == 1 and info["piqa"]["higher_is_better"]["acc"] is True
    assert info["gsm8k_cot"]["lm_eval_version"] is not None and info["gsm8k_cot"]["source"] == "lm-eval"
    hashes = [r["prompt_hash"] for r in piqa]
    cfg0 = EvalConfig(name="t", tasks=["piqa"], data_dir=str(data_dir), limit=2, batch_size=4, bootstrap_iters=10,
                      log_samples=True, num_fewshot=0)
    ev0 = Evaluator(model, tok, cfg0)
    ev0.evaluate()
    assert [r["doc_hash"] for r in ev0.last_samples["piqa"]] == [r["doc_hash"] for r in piqa]  # same questions ...
    assert not set(hashes) & {r["prompt_hash"] for r in ev0.last_samples["piqa"]}  # ... other prompts
