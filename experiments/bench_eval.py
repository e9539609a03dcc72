"""Benchmark: the paper's evaluation (gsm8k_cot, RACE, MMLU) from ../shared/data on a real model, with limits.

Runs the local twins of the stock lm-eval tasks (``eval.data_dir`` = ../shared/data) through
``mathneuro.evaluation.Evaluator`` on an in-memory model, then (``--probes``) the built-in probes,
including the GSM8K-style probe with and without the shared-prefix KV cache (same answers, faster).
Prints scores and seconds per example. Not a test: it needs the GGUF models of ../shared/models
(``bash ../shared/models/fetch-models.sh ~/.cache/mathneuro/gguf qwen2.5-coder-0.5b``).

    .venv/bin/python experiments/bench_eval.py --gsm8k-limit 20 --race-limit 50 --mmlu-limit 1 --probes
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default=str(Path.home() / ".cache/mathneuro/gguf/qwen2.5-coder-0.5b/model.gguf"),
                   help="a .gguf file, a folder holding one, or a plain model folder")
    p.add_argument("--data-dir", default=str(ROOT.parent / "shared" / "data"))
    p.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"])
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--gsm8k-limit", type=int, default=20)
    p.add_argument("--race-limit", type=int, default=50)
    p.add_argument("--mmlu-limit", type=int, default=1, help="per subject (57 subjects)")
    p.add_argument("--tasks", nargs="*", default=["gsm8k_cot", "race", "mmlu"])
    p.add_argument("--probes", action="store_true", help="also run arith, mc, ppl and gsm8k_gen (cache on/off)")
    p.add_argument("--gen-limit", type=int, default=10, help="problems for the gsm8k_gen probe")
    p.add_argument("--out", default=None, help="write the results as JSON here")
    return p.parse_args(argv)


def load(model_path: str, dtype: str):
    """(model, tokenizer) via mathneuro.models (GGUF converted once to a cached folder), else transformers."""
    start = time.perf_counter()
    try:
        from mathneuro.models import load_model

        model, tok = load_model(model_path, dtype=dtype, device="auto")
    except Exception as exc:  # noqa: BLE001 - fall back to a direct GGUF load
        print(f"mathneuro.models.load_model failed ({exc}); loading the GGUF directly", file=sys.stderr)
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        path = Path(model_path)
        folder, gguf = (path.parent, path.name) if path.suffix == ".gguf" else (path, "model.gguf")
        model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=gguf, dtype=getattr(torch, dtype))
        tok = AutoTokenizer.from_pretrained(folder, gguf_file=gguf)
        model.eval()
    print(f"loaded {model_path} in {time.perf_counter() - start:.1f} s ({type(model).__name__})", flush=True)
    return model, tok


def run(ev, label: str, rows: list[dict]) -> dict[str, float]:
    """Evaluate, print each task's scores and seconds per example, and collect rows."""
    metrics = ev.evaluate()
    for task in ev.cfg.tasks:
        n = ev.last_num_examples.get(task, 0)
        sec = ev.last_seconds.get(task, float("nan"))
        scores = {k.split("/", 2)[2]: round(v, 4) for k, v in metrics.items() if k.split("/")[1] == task}
        row = {"run": label, "task": task, "examples": n, "seconds": round(sec, 1),
               "seconds_per_example": round(sec / n, 3) if n else None, "scores": scores}
        rows.append(row)
        print(json.dumps(row), flush=True)
    return metrics


def compare_prefix_cache(model, tok, args: argparse.Namespace) -> dict:
    """The GSM8K-style probe with and without the shared-prefix KV cache: same answers? how much faster?"""
    from mathneuro.eval_tasks.fewshot import gsm8k_cot
    from mathneuro.evaluation.answers import extract_gsm_answer, gold_answer, numbers_match
    from mathneuro.evaluation.generation import greedy_generate
    from mathneuro.evaluation.probes import gsm8k_prefix, gsm8k_prompt, read_jsonl

    records = read_jsonl(Path(args.data_dir) / "gsm8k" / "test.jsonl")[: args.gen_limit]
    prefix = gsm8k_prefix(gsm8k_cot(), 8)
    texts, seconds = {}, {}
    for reuse in (True, False):
        start = time.perf_counter()
        texts[reuse] = greedy_generate(model, tok, [gsm8k_prompt(r["question"]) for r in records], prefix=prefix,
                                       max_new_tokens=256, stop=("\n\n", "Q:"), batch_size=args.batch_size,
                                       reuse_prefix_cache=reuse, progress=True)
        seconds[reuse] = time.perf_counter() - start
    scores = {}
    for reuse in (True, False):
        correct = [numbers_match(extract_gsm_answer(t), gold_answer(r["answer"]))
                   for t, r in zip(texts[reuse], records, strict=True)]
        scores["exact_match_cached" if reuse else "exact_match_uncached"] = sum(correct) / len(correct)
    same = sum(a == b for a, b in zip(texts[True], texts[False], strict=True))
    # fp32: identical; bf16: batch shapes change the rounding, so a few greedy paths may part (as in any batching)
    row = {"run": "gsm8k_gen prefix cache", "task": "gsm8k_gen", "examples": len(records),
           "identical_answers": f"{same}/{len(records)}",
           "seconds_per_example_cached": round(seconds[True] / len(records), 3),
           "seconds_per_example_uncached": round(seconds[False] / len(records), 3),
           "scores": scores}
    print(json.dumps(row), flush=True)
    return row


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from mathneuro.evaluation import EvalConfig, Evaluator

    model, tok = load(args.model, args.dtype)
    rows: list[dict] = []
    cfg = EvalConfig(name="bench", tasks=list(args.tasks), data_dir=args.data_dir, batch_size=args.batch_size)
    cfg.limits.update(gsm8k_cot=args.gsm8k_limit, race=args.race_limit, mmlu=args.mmlu_limit)
    if cfg.tasks:
        run(Evaluator(model, tok, cfg), "harness", rows)
    if args.probes:
        probes = EvalConfig(name="bench-probes", tasks=["arith", "mc", "ppl"], data_dir=args.data_dir,
                            batch_size=args.batch_size)
        probes.arith.num_problems = 100
        run(Evaluator(model, tok, probes), "probes", rows)
        rows.append(compare_prefix_cache(model, tok, args))
    if args.out:
        Path(args.out).write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
