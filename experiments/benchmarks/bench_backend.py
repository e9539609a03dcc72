"""Benchmark: lm-eval's ``hf`` against mathneuro's ``mathneuro-hf`` backend, both through ``simple_evaluate``.

What an lm-eval user would run: the same ``model_args`` string, the same task, ``model="hf"`` then
``model="mathneuro-hf"`` (optionally in chunks of ``--chunk`` questions, alternating, so a shared machine's
load falls on both alike). Prints the seconds of each (model load included), their ratio, each
backend's metrics, and how many questions got the same generated text; ``--out`` writes it as JSON.
The task is mathneuro's local twin of ``gsm8k_cot`` (8-shot chain of thought) over
``<data-dir>/gsm8k/test.jsonl``. Not a test: it needs a real model folder (a GGUF of ../shared/models
converted to a plain folder, docs/evaluation.md).

    .venv/bin/python experiments/benchmarks/bench_backend.py --model /tmp/smollm2-135m-hf --limit 16 --out bench.json
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import time
from pathlib import Path

import lm_eval
from lm_eval.tasks import TaskManager

import mathneuro  # noqa: F401  registers mathneuro-hf
from mathneuro.evaluation.task_table import local_tasks_dir

ROOT = Path(__file__).resolve().parents[2]
TASK = "gsm8k_cot_local"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", required=True, help="a model folder (or Hub id) for pretrained=")
    p.add_argument("--data-dir", default=str(ROOT.parent / "shared" / "data"))
    p.add_argument("--dtype", default="float32")
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--limit", type=int, default=16, help="questions (the first N of the test file)")
    p.add_argument("--chunk", type=int, default=0, help="questions per alternation (0: each backend runs all at once)")
    p.add_argument("--max-gen-toks", type=int, default=None, help="cap on generated tokens (default: the task's 256)")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    p.add_argument("--out", default=None, help="write the results and every answer as JSON here")
    return p.parse_args(argv)


def cpu_name() -> str:
    """``lscpu``'s model name (Linux), else the platform's processor string."""
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return platform.processor() or "unknown"
    names = [line.split(":", 1)[1].strip() for line in out.splitlines() if line.startswith("Model name")]
    return names[0] if names else "unknown"


def run(backend: str, args: argparse.Namespace, manager: TaskManager, samples: dict | None) -> tuple[float, dict]:
    """One ``simple_evaluate`` of ``backend`` over ``samples`` (lm-eval's per-task doc indices; None: the first
    ``--limit``): (seconds, results)."""
    gen_kwargs = {"max_gen_toks": args.max_gen_toks} if args.max_gen_toks else None
    start = time.perf_counter()
    results = lm_eval.simple_evaluate(
        model=backend, model_args=f"pretrained={args.model},dtype={args.dtype}", tasks=[TASK], device="cpu",
        batch_size=args.batch_size, task_manager=manager, samples=samples, limit=None if samples else args.limit,
        log_samples=True, bootstrap_iters=0, gen_kwargs=gen_kwargs)
    return time.perf_counter() - start, results


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    manager = TaskManager(include_path=[str(local_tasks_dir())], include_defaults=False,
                          metadata={"data_dir": str(Path(args.data_dir).resolve())})
    step = args.chunk or args.limit
    chunks = [list(range(s, min(s + step, args.limit))) for s in range(0, args.limit, step)]
    seconds = {"hf": 0.0, "mathneuro-hf": 0.0}
    answers: dict[str, dict[int, str]] = {"hf": {}, "mathneuro-hf": {}}
    metrics: dict[str, list] = {"hf": [], "mathneuro-hf": []}
    for chunk in chunks:
        for backend in ("hf", "mathneuro-hf"):
            took, results = run(backend, args, manager, {TASK: chunk} if args.chunk else None)
            seconds[backend] += took
            metrics[backend].append({k: v for k, v in results["results"][TASK].items() if "," in k})
            for s in results["samples"][TASK]:
                answers[backend][int(s["doc_id"])] = s["resps"][0][0]
            print(f"{backend}: questions {chunk[0]}-{chunk[-1]} in {took:.1f} s", flush=True)
    same = sum(answers["hf"][i] == answers["mathneuro-hf"].get(i) for i in answers["hf"])
    report = {"cpu": cpu_name(), "model": args.model, "dtype": args.dtype, "task": TASK, "limit": args.limit,
              "batch_size": args.batch_size, "max_gen_toks": args.max_gen_toks, "seconds": seconds,
              "speedup": seconds["hf"] / seconds["mathneuro-hf"], "same_answers": same, "questions": len(answers["hf"]),
              "metrics": metrics, "lm_eval": lm_eval.__version__,
              "differ": sorted(i for i in answers["hf"] if answers["hf"][i] != answers["mathneuro-hf"].get(i))}
    print(json.dumps({k: v for k, v in report.items() if k != "metrics"}, indent=1))
    print("metrics:", json.dumps(metrics))
    if args.out:
        Path(args.out).write_text(json.dumps({**report, "answers": answers}, indent=1, default=str))


if __name__ == "__main__":
    main()
