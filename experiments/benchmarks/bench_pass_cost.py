"""Benchmark: what a drafted pass costs against a decode step, on this machine (drafting's ceiling).

Drafted decoding (``eval.draft``) replaces one decode step per generated token by passes that feed
each row several proposed tokens. Its gain is bounded by how the cost of a pass grows with the
tokens it feeds. This measures, for a batch of ``--batch`` rows continuing from a ``--context``-token
KV cache (the few-shot prompt):

- a decode step (1 token per row), averaged over ``--steps`` steps;
- a teacher-forced pass of ``w`` tokens per row for each ``w`` of ``--widths`` (the cache is cropped
  back after each, so every pass starts from the same cache);

and prints per width the pass's seconds, its cost in decode steps, and the ceiling ``w x step /
pass``: the speed-up if every one of the ``w`` proposed tokens were accepted. The planner's
``token_cost`` (one more token per row relative to a pass's fixed cost) is fitted from the same
numbers. Random weights of the same architecture cost the same; by default the model is the
GGUF of ``../shared/models``.

    .venv/bin/python experiments/benchmarks/bench_pass_cost.py --dtype bfloat16 --threads 2
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import time
from pathlib import Path

import torch

DEFAULT_MODEL = Path.home() / ".cache/mathneuro-models/qwen2.5-coder-0.5b/model.gguf"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default=str(DEFAULT_MODEL), help="a .gguf file, a folder holding one, or a model folder")
    p.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"])
    p.add_argument("--device", default="auto")
    p.add_argument("--batch", type=int, nargs="+", default=[8], help="rows per pass (several: one table each)")
    p.add_argument("--context", type=int, default=900, help="tokens already in the KV cache")
    p.add_argument("--steps", type=int, default=20, help="decode steps averaged")
    p.add_argument("--widths", default="1,2,4,8,16,32,64,128,200", help="tokens per row of a drafted pass")
    p.add_argument("--repeats", type=int, default=3, help="passes timed per width (the median is kept)")
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--stock-attention", action="store_true",
                   help="transformers' SDPA as it is (copies a grouped-query cache per head for every masked pass "
                        "of several tokens), not evaluation.gqa_attention's in-place attention")
    p.add_argument("--out", default=None, help="write the numbers as JSON here")
    return p.parse_args(argv)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


@torch.no_grad()
def measure(model, batch: int, context: int, steps: int, widths: list[int], repeats: int) -> dict:
    """Seconds of a decode step and of a pass per width, from one ``context``-token cache of ``batch`` rows."""
    from transformers import DynamicCache

    from mathneuro.evaluation.generation import cache_kwarg

    kw = cache_kwarg(model)
    device = next(model.parameters()).device
    vocab = int(model.config.vocab_size)
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(100, vocab - 100, (batch, context + max(widths) + steps), generator=gen).to(device)
    mask = torch.ones_like(ids)
    mask[::2, context - 40:context - 30] = 0  # pads between prefix and suffix, as the prefix-cache path has them
    cache = DynamicCache()
    model(input_ids=ids[:, :context], attention_mask=mask[:, :context], use_cache=True, logits_to_keep=1,
          **{kw: cache})

    def timed(width: int) -> float:
        _sync(device)
        start = time.perf_counter()
        model(input_ids=ids[:, context:context + width], attention_mask=mask[:, :context + width], use_cache=True,
              logits_to_keep=width, **{kw: cache})
        _sync(device)
        seconds = time.perf_counter() - start
        cache.crop(-width)
        return seconds

    timed(1)  # warm-up
    step = sorted(timed(1) for _ in range(steps))[steps // 2]
    passes = {w: sorted(timed(w) for _ in range(repeats))[repeats // 2] for w in widths}
    return {"batch": batch, "context": context, "step_s": step, "pass_s": passes}


def token_cost_fit(result: dict) -> float:
    """One more token per row relative to a pass's fixed cost: the least-squares line pass(w) = a + b w,
    returned as b / (a * batch) (the planner multiplies by the rows)."""
    ws = sorted(result["pass_s"])
    xs, ys = torch.tensor(ws, dtype=torch.float64), torch.tensor([result["pass_s"][w] for w in ws], dtype=torch.float64)
    b = float(((xs - xs.mean()) * (ys - ys.mean())).sum() / ((xs - xs.mean()) ** 2).sum())
    a = max(float(ys.mean() - b * xs.mean()), 1e-9)
    return b / (a * result["batch"])


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if args.threads:
        torch.set_num_threads(args.threads)
    from mathneuro.models import load_model

    model, _ = load_model(args.model, dtype=args.dtype, device=args.device)
    model.eval()
    device = next(model.parameters()).device
    widths = [int(w) for w in args.widths.split(",")]
    cpu = platform.processor() or platform.machine()
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                   if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    out = {"model": args.model, "dtype": args.dtype, "device": str(device), "cpu": cpu,
           "threads": torch.get_num_threads(), "results": []}
    from mathneuro.evaluation.decoding.gqa_attention import grouped_query_attention

    attention = contextlib.nullcontext() if args.stock_attention else grouped_query_attention(model)
    out["attention"] = "stock" if args.stock_attention else "in-place grouped-query"
    for batch in args.batch:
        with attention:
            r = measure(model, batch, args.context, args.steps, widths, args.repeats)
        r["token_cost"] = token_cost_fit(r)
        out["results"].append(r)
        print(f"\n{Path(args.model).parent.name}, {args.dtype}, {device} ({cpu}, {out['threads']} threads), "
              f"{out['attention']} attention, batch {batch}, {args.context}-token cache: decode step "
              f"{r['step_s'] * 1e3:.1f} ms; "
              f"fitted token_cost {r['token_cost']:.4f} (1/{1 / r['token_cost']:.0f})")
        print("| tokens per row | pass ms | decode steps | ceiling (w x step / pass) |")
        print("|---|---|---|---|")
        for w, s in r["pass_s"].items():
            print(f"| {w} | {s * 1e3:.1f} | {s / r['step_s']:.2f} | {w * r['step_s'] / s:.2f}x |")
    if args.out:
        Path(args.out).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
