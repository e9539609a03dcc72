"""Benchmark: identification (statistics pass) against plain batched forward passes.

Prints, for a real model, the time of MathNeuro's statistics pass over N samples as a
ratio to the fastest plain forward over the same batches, the original's per-sample
scoring (|W|·a materialised in bf16 per sample, docs/method.md#1-importance-of-a-weight,
docs/method.md#7-where-mathneuro-departs-from-the-original-code) on a subset, and peak memory against the weights' size.
Ratios are measured in one run (this machine is noisy).

    python experiments/benchmarks/bench_identification.py [--model embedded://smollm2-135m] [--n 64]
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import torch

from mathneuro.data.datasets import load_records, render
from mathneuro.models import load_model
from mathneuro.models.targets import base_model, find_target_linears
from mathneuro.statistics.passes import collect_statistics, length_sorted_batches, right_padded, tokenize
from mathneuro.util.peak_memory import peak_rss_mb, reset_peak_memory

ROOT = Path(__file__).resolve().parents[2]


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def batches(tokenizer, texts, batch_size, max_length, device):
    """The same length-sorted, right-padded batches collect_statistics forms."""
    ids = tokenize(tokenizer, texts, max_length)
    pad = tokenizer.pad_token_id or 0
    out = []
    for batch in length_sorted_batches([len(r) for r in ids], batch_size):
        x, m = right_padded([ids[i] for i in batch], pad)
        out.append((x.to(device), m.to(device)))
    return out


@torch.no_grad()
def plain_forward(model, prepared) -> None:
    dec = base_model(model)
    for x, m in prepared:
        dec(input_ids=x, attention_mask=m, use_cache=False)


@torch.no_grad()
def original_per_sample(model, tokenizer, texts, max_length) -> None:
    """The original's scoring: one sample per pass, |W|·||X||₂ materialised and summed in the model dtype."""
    targets = find_target_linears(model)
    acc = {n: torch.zeros_like(m.weight) for n, m in targets.items()}

    def hook(name, mod):
        def fn(_m, args):
            x = args[0][0]
            acc[name] += mod.weight.abs() * x.norm(p=2, dim=0)
        return fn

    handles = [m.register_forward_pre_hook(hook(n, m)) for n, m in targets.items()]
    try:
        for text in texts:
            enc = tokenizer(text, return_tensors="pt", truncation=True, max_length=max_length)
            model(**{k: v.to(model.device) for k, v in enc.items()})
    finally:
        for h in handles:
            h.remove()


def best_of(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="embedded://smollm2-135m")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--data", default=str(ROOT.parent / "shared/data/gsm8k/train.jsonl"))
    ap.add_argument("--n", type=int, default=64)
    ap.add_argument("--original-n", type=int, default=8, help="samples for the (slow) original scoring")
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--max-length", type=int, default=256)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: all cores)")
    ap.add_argument("--json", default=None, help="also write the numbers here")
    args = ap.parse_args()

    torch.set_num_threads(args.threads or os.cpu_count() or 1)
    model, tok = load_model(args.model, dtype=args.dtype, device=args.device)
    weight_mb = sum(p.numel() * p.element_size() for p in model.parameters()) / 2**20
    if os.path.exists(args.data):
        records = load_records(args.data)[: args.n]
        texts = render(records, "Question: {question}\nAnswer: {answer}")
    else:
        records = load_records("embedded://math_demo")[: args.n]
        texts = render(records, "Question: {question}\nAnswer: {answer}")
    device = next(model.parameters()).device
    prepared = batches(tok, texts, args.batch_size, args.max_length, device)
    tokens = sum(int(m.sum()) for _, m in prepared)

    plain_forward(model, prepared[:1])  # warm-up
    t_plain = best_of(lambda: plain_forward(model, prepared), args.repeats)
    t0 = time.perf_counter()
    collect_statistics(model, tok, texts[:8], batch_size=args.batch_size, max_length=args.max_length,
                       progress=False)  # one-time: compiles the fused kernel (kernel="auto")
    t_warmup = time.perf_counter() - t0

    def identify(kernel: str):
        return lambda: collect_statistics(model, tok, texts, batch_size=args.batch_size,
                                          max_length=args.max_length, progress=False, kernel=kernel)

    rss_before = rss_mb()
    reset_peak_memory()
    t_stats = best_of(identify("auto"), args.repeats)
    peak_extra = peak_rss_mb() - rss_before
    gpu_peak = torch.cuda.max_memory_allocated() / 2**20 if device.type == "cuda" else None
    t_eager = best_of(identify("eager"), args.repeats)
    sub = texts[: args.original_n]
    t_orig = best_of(lambda: original_per_sample(model, tok, sub, args.max_length), 1)
    t_ours_sub = best_of(lambda: collect_statistics(model, tok, sub, batch_size=args.batch_size,
                                                    max_length=args.max_length, progress=False), 1)
    result = {
        "model": args.model, "dtype": args.dtype, "device": str(device), "samples": len(texts), "tokens": tokens,
        "plain_forward_s": round(t_plain, 3), "identification_s": round(t_stats, 3),
        "identification_over_plain": round(t_stats / t_plain, 3),
        "eager_identification_over_plain": round(t_eager / t_plain, 3),
        "one_time_kernel_warmup_s": round(t_warmup, 2),
        "threads": torch.get_num_threads(),
        "original_per_sample_s_per_sample": round(t_orig / len(sub), 3),
        "ours_s_per_sample": round(t_ours_sub / len(sub), 3),
        "speedup_over_original": round((t_orig / len(sub)) / (t_ours_sub / len(sub)), 2),
        "weights_mb": round(weight_mb, 1),
        "peak_rss_during_identification_over_weights": round((weight_mb + max(peak_extra, 0)) / weight_mb, 3),
        "gpu_peak_over_weights": round(gpu_peak / weight_mb, 3) if gpu_peak else None,
    }
    for k, v in result.items():
        print(f"{k:48s} {v}")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
