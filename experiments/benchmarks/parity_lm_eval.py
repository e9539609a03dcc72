"""Parity: mathneuro's evaluation of a model against the stock ``lm_eval`` command on the same model folder.

For each task, the same local twin (``<task>_local``, over files laid out like ../shared/data) is run
twice: through mathneuro's :class:`~mathneuro.evaluation.Evaluator` (the in-memory model, lm-eval's
``mathneuro-hf`` backend, the engine on with ``--prefix-cache``), and by ``lm_eval run --model hf`` in a subprocess
(``--include_path`` our task folder). Writes the metrics of both, and per question whether the scored
outcome (acc, exact match) is the same.

    .venv/bin/python experiments/benchmarks/parity_lm_eval.py --model ~/.cache/mathneuro/models/<converted smollm2> \\
        --data-dir ../shared/data --tasks race gsm8k_cot --limit 20 --out experiments/results/parity_lm_eval.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from mathneuro.evaluation import EvalConfig, Evaluator, local_tasks_dir
from mathneuro.evaluation.task_table import TASKS
from mathneuro.models import load_model
from mathneuro.models.devices import cpu_has_bf16, cpu_name

PER_EXAMPLE = ("acc", "exact_match,strict-match", "exact_match,flexible-extract")


def ours(model, tok, task: str, args) -> tuple[dict, dict, float]:
    cfg = EvalConfig(name="parity", tasks=[task], limit=args.limit, limits={}, batch_size=args.batch_size,
                     data_dir=str(args.data_dir), prefix_cache=args.prefix_cache, log_samples=True,
                     softmax_dtype=None, progress=False)
    t0 = time.perf_counter()
    ev = Evaluator(model, tok, cfg)
    metrics = ev.evaluate()
    seconds = time.perf_counter() - t0
    records = {int(r["doc_id"]): r for r in ev.last_samples.get(task, [])}
    return metrics, records, seconds


def stock(task: str, args) -> tuple[dict, dict, float]:
    local = TASKS[task].local
    with tempfile.TemporaryDirectory() as out:
        cmd = [str(Path(sys.executable).parent / "lm_eval"), "run", "--model", "hf", "--model_args",
               f"pretrained={args.model},dtype={args.dtype}", "--tasks", local, "--include_path",
               str(local_tasks_dir()), "--limit", str(args.limit), "--batch_size", str(args.batch_size),
               "--output_path", out, "--log_samples", "--device", "cpu"]
        env = {**os.environ, "MATHNEURO_DATA_DIR": str(args.data_dir)}
        t0 = time.perf_counter()
        subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL)
        seconds = time.perf_counter() - t0
        results = json.loads(next(Path(out).rglob("results_*.json")).read_text())
        metrics = {k: v for k, v in results["results"][local].items() if isinstance(v, (int, float))}
        records: dict[int, dict] = {}
        for line in next(Path(out).rglob(f"samples_{local}_*.jsonl")).read_text().splitlines():
            item = json.loads(line)  # one line per document and filter
            for metric in item["metrics"]:
                key = metric if item["filter"] == "none" else f"{metric},{item['filter']}"
                records.setdefault(int(item["doc_id"]), {})[key] = item[metric]
    return metrics, records, seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, help="a plain Hugging Face model folder")
    parser.add_argument("--data-dir", required=True, type=Path)
    parser.add_argument("--tasks", nargs="+", default=["race", "gsm8k_cot"])
    parser.add_argument("--limit", type=int, default=20)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--prefix-cache", action="store_true",
                        help="mathneuro's default; off: plain HFLM on both sides")
    parser.add_argument("--threads", type=int, default=0)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    args.data_dir = args.data_dir.resolve()
    if args.threads:
        torch.set_num_threads(args.threads)
    model, tok = load_model(args.model, dtype=args.dtype, device="cpu")
    report = {"model": args.model, "dtype": args.dtype, "limit": args.limit, "batch_size": args.batch_size,
              "prefix_cache": args.prefix_cache, "cpu": cpu_name(), "cpu_bf16": cpu_has_bf16(),
              "threads": torch.get_num_threads(), "tasks": {}}
    for task in args.tasks:
        m_ours, r_ours, s_ours = ours(model, tok, task, args)
        m_stock, r_stock, s_stock = stock(task, args)
        docs = sorted(set(r_ours) & set(r_stock))
        same = {}
        for metric in PER_EXAMPLE:
            pairs = [(r_ours[d][metric], r_stock[d][metric]) for d in docs
                     if metric in r_ours[d] and metric in r_stock[d]]
            if pairs:
                same[metric] = f"{sum(float(a) == float(b) for a, b in pairs)}/{len(pairs)}"
        report["tasks"][task] = {"mathneuro": m_ours, "lm_eval": m_stock, "same_per_example": same,
                                 "seconds": {"mathneuro": round(s_ours, 1), "lm_eval": round(s_stock, 1)}}
        print(task, json.dumps(report["tasks"][task], indent=1))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=2) + "\n")
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
