"""Benchmark: an lm-eval task through lm-eval's ``HFLM`` code and through the decoding engine (``mathneuro-hf``), side
by side.

A generation task (``gsm8k_cot``: the shared few-shot prefix) or a multiple-choice one (``race``: the
article shared by a question's choices; ``mmlu``: one-token answer letters, scored from the last
position only; per question the choices' log-likelihoods are compared). A group such as ``mmlu``
runs ``--limit`` questions per subtask. Each path's peak resident memory is measured on its own
(Linux: the peak is reset before each path).

With ``--draft`` it benchmarks drafted greedy decoding instead (``experiments/benchmarks/bench_draft.py``): for
each edit of ``--edits`` the prefix-cache path undrafted (today's) and drafted from the unedited
model's answers, interleaved chunk by chunk in one process.

Runs the same lm-eval task (default: ``gsm8k_cot``'s local twin, 8-shot chain of thought, from
``--data-dir``) on the same in-memory model twice in one process, ``eval.prefix_cache`` off and
on, and prints for each path the seconds, seconds per question and the task's metrics, then how
many questions got the same generated text and the same extracted answer (per lm-eval filter),
with the ids of those that differ. Ratios are measured in the same run, so a shared, busy machine
slows both paths alike. Not a test: it needs a real model (a GGUF of ../shared/models).

    nohup .venv/bin/python experiments/benchmarks/bench_eval.py --limit 24 --out bench.json > bench.log 2>&1 &
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_MODEL = Path.home() / ".cache/mathneuro-models/qwen2.5-coder-0.5b/model.gguf"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default=str(DEFAULT_MODEL), help="a .gguf file, a folder holding one, or a model folder")
    p.add_argument("--data-dir", default=str(ROOT.parent / "shared" / "data"))
    p.add_argument("--task", default="gsm8k_cot",
                   help="a task of mathneuro's task table (generation or multiple choice); "
                   "--draft also math_zeroshot: MATH problems zero-shot, \"Problem: ... Solution:\" (bench_draft.py)")
    p.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"])
    p.add_argument("--device", default="auto", help="auto, cpu or cuda")
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--limit", type=int, default=24,
                   help="questions (the first N of the test file; per subtask of a group)")
    p.add_argument("--max-gen-toks", type=int, default=None, help="cap on generated tokens (default: the task's)")
    p.add_argument("--order", default="plain,prefix", help="which paths run, in this order")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    p.add_argument("--out", default=None, help="write results and per-question answers as JSON here (after each path)")
    p.add_argument("--draft", action="store_true",
                   help="drafted decoding: the prefix-cache path undrafted vs drafted from the unedited model's "
                        "answers, for each of --edits (see bench_draft.py)")
    p.add_argument("--edits", default="scale:0.05:1.1,scale:0.05:1.01,prune:0.15",
                   help="--draft: edits as intervention:top_k[:scalar], M from MathNeuro identification")
    p.add_argument("--identify-samples", type=int, default=100, help="--draft: samples per dataset for M")
    p.add_argument("--filter-path", default=None,
                   help="--draft: filter data (default: <data-dir>/mmlu/validation_prerelease.jsonl)")
    p.add_argument("--cache-dir", default=str(ROOT / "outputs" / "bench_cache"),
                   help="--draft: statistics cache, and the selections (reused across dtypes)")
    p.add_argument("--chunk", type=int, default=16,
                   help="--draft: questions per lm-eval call; the two paths alternate chunk by chunk")
    p.add_argument("--draft-tokens", type=int, default=None, help="--draft: eval.draft_tokens (default: adaptive)")
    p.add_argument("--lookup", action=argparse.BooleanOptionalAction, default=True,
                   help="--draft: also the unedited model by prompt lookup against today's path (--no-lookup: not)")
    p.add_argument("--continuous", default="auto", choices=["auto", "on", "off"],
                   help="--draft: eval.continuous_batching of the greedy-loop paths (not off: also undrafted in "
                        "lm-eval's batches, to compare)")
    p.add_argument("--noise-batch", type=int, default=None,
                   help="--draft: also run each edit undrafted in batches of this size (the bf16 noise floor)")
    return p.parse_args(argv)


def load(model_path: str, dtype: str, device: str):
    """(model, tokenizer) via mathneuro.models (a GGUF is converted once into the shared cache)."""
    from mathneuro.models import load_model

    start = time.perf_counter()
    model, tok = load_model(model_path, dtype=dtype, device=device)
    print(f"loaded {model_path} in {time.perf_counter() - start:.1f} s ({type(model).__name__}, {dtype}, "
          f"{next(model.parameters()).device})", flush=True)
    return model, tok


def run_path(model, tok, args: argparse.Namespace, prefix_cache: bool) -> dict:
    """One lm-eval run of the task; returns seconds, metrics and per-question generations and answers."""
    import lm_eval

    from mathneuro.evaluation import EvalConfig
    from mathneuro.evaluation.harness import Harness, flatten_lm_eval_metrics, preserved_rng
    from mathneuro.util.peak_memory import peak_rss_mb, reset_peak_memory

    cfg = EvalConfig(name="bench", tasks=[args.task], data_dir=args.data_dir, batch_size=args.batch_size,
                     prefix_cache=prefix_cache, max_gen_toks=args.max_gen_toks, bootstrap_iters=0)
    cfg.validate()
    harness = Harness(model, tok, cfg, cfg.resolved_data_dir())
    name = harness.lm_eval_name(args.task)
    tasks = harness.built_task(args.task)  # datasets read before the clock starts
    lm = harness.lm
    gen_kwargs = {"max_gen_toks": args.max_gen_toks} if args.max_gen_toks else None
    reset_peak_memory()
    start, cpu_start = time.perf_counter(), time.process_time()
    with preserved_rng():
        results = lm_eval.simple_evaluate(model=lm, tasks=tasks, task_manager=harness.task_manager,
                                          limit=args.limit, bootstrap_iters=0, log_samples=True,
                                          gen_kwargs=gen_kwargs, fewshot_random_seed=cfg.fewshot_seed)
    seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu_start
    peak_rss_gb = peak_rss_mb() * 2**20 / 1e9  # GB, as in the stored results
    texts: dict[str, object] = {}
    answers: dict[str, dict[str, str]] = {}
    samples = [(task, s) for task, rows in results["samples"].items() for s in rows]  # a group: its subtasks
    for task, sample in samples:
        doc_id = f"{task}/{int(sample['doc_id']):05d}" if len(results["samples"]) > 1 else int(sample["doc_id"])
        choices = _loglikelihoods(sample["filtered_resps"])
        if choices is not None:  # a multiple-choice task: the choices' log-likelihoods and the one picked
            texts[doc_id] = choices
            answers.setdefault(f"argmax ({sample['filter']})", {})[doc_id] = str(choices.index(max(choices)))
            continue
        texts[doc_id] = sample["resps"][0][0]
        answers.setdefault(sample["filter"], {})[doc_id] = str(sample["filtered_resps"][0])
    stats = getattr(lm, "prefix_stats", None)
    return {"path": "prefix" if prefix_cache else "plain", "seconds": seconds, "cpu_seconds": cpu_seconds,
            "peak_rss_gb": peak_rss_gb, "questions": len(texts),
            "metrics": flatten_lm_eval_metrics(results["results"][name]), "texts": texts, "answers": answers,
            "prefix_stats": vars(stats) if stats is not None else None}


def _loglikelihoods(filtered: object) -> list[float] | None:
    """A multiple-choice sample's per-choice log-likelihoods (lm-eval's ``(ll, is_greedy)`` pairs), else None."""
    if isinstance(filtered, (list, tuple)) and filtered and all(
            isinstance(r, (list, tuple)) and len(r) == 2 and isinstance(r[0], float) for r in filtered):
        return [float(r[0]) for r in filtered]
    return None


def compare(runs: dict[str, dict]) -> dict:
    """Same text (for multiple choice: log-likelihoods within 1e-3) / same answer per question, plain vs prefix."""
    a, b = runs["plain"], runs["prefix"]
    ids = sorted(a["texts"])

    def same(x, y) -> bool:
        if isinstance(x, list):
            return len(x) == len(y) and all(abs(u - v) <= 1e-3 * max(1.0, abs(u)) for u, v in zip(x, y, strict=True))
        return x == y

    out = {"questions": len(ids), "same_text": sum(same(a["texts"][i], b["texts"][i]) for i in ids),
           "text_differs": [i for i in ids if not same(a["texts"][i], b["texts"][i])], "same_answer": {}}
    lls = [(u, v) for i in ids if isinstance(a["texts"][i], list) for u, v in zip(a["texts"][i], b["texts"][i],
                                                                                  strict=True)]
    if lls:
        out["max_loglikelihood_diff"] = max(abs(u - v) for u, v in lls)
    for filt, plain_answers in a["answers"].items():
        same = [i for i in ids if plain_answers[i] == b["answers"][filt][i]]
        out["same_answer"][filt] = len(same)
    out["speedup"] = a["seconds"] / b["seconds"]
    out["cpu_speedup"] = a["cpu_seconds"] / b["cpu_seconds"]
    return out


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    if args.draft:
        from bench_draft import draft_benchmark  # its own folder is on sys.path when this script runs

        return draft_benchmark(args)
    model, tok = load(args.model, args.dtype, args.device)
    runs: dict[str, dict] = {}
    for path in args.order.split(","):
        if path not in ("plain", "prefix"):
            print(f"--order: unknown path {path!r}; allowed: plain, prefix", file=sys.stderr)
            return 2
        runs[path] = run_path(model, tok, args, prefix_cache=path == "prefix")
        r = runs[path]
        print(json.dumps({"path": path, "seconds": round(r["seconds"], 1), "cpu_seconds": round(r["cpu_seconds"], 1),
                          "peak_rss_gb": r["peak_rss_gb"],
                          "seconds_per_question": round(r["seconds"] / r["questions"], 2),
                          "metrics": {k: round(v, 4) for k, v in r["metrics"].items()},
                          "prefix_stats": r["prefix_stats"]}), flush=True)
        if args.out:
            Path(args.out).write_text(json.dumps({"args": vars(args), "runs": runs, "summary": None}, indent=1))
    summary = None
    if len(runs) == 2:
        summary = compare(runs)
        n = summary["questions"]
        print(f"\n{args.task}, {n} questions, batch {args.batch_size}, {args.dtype}, {args.model}")
        print(f"{'path':<8} {'seconds':>8} {'s/question':>11} {'CPU s':>8} {'peak GB':>8}  metrics")
        for path in ("plain", "prefix"):
            r = runs[path]
            metrics = ", ".join(f"{k}={v:.3f}" for k, v in r["metrics"].items() if not k.endswith("_stderr"))
            print(f"{path:<8} {r['seconds']:>8.1f} {r['seconds'] / n:>11.2f} {r['cpu_seconds']:>8.1f} "
                  f"{r['peak_rss_gb']:>8.2f}  {metrics}")
        print(f"speed-up {summary['speedup']:.2f}x (CPU time {summary['cpu_speedup']:.2f}x); same generated text "
              f"{summary['same_text']}/{n}; same answer: "
              + ", ".join(f"{f} {k}/{n}" for f, k in summary["same_answer"].items()))
        if "max_loglikelihood_diff" in summary:
            print(f"largest difference of a choice's log-likelihood: {summary['max_loglikelihood_diff']:.2e}")
        if summary["text_differs"]:
            print(f"texts differ for doc ids {summary['text_differs']}")
    if args.out:
        Path(args.out).write_text(json.dumps({"args": vars(args), "runs": runs, "summary": summary}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
