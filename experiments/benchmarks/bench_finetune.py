"""Benchmark: a ``finetune`` step (only the selected weights train) against a plain training step.

For a model, a top-K (default 5 % of every decoder linear, drawn at random per matrix: MathNeuro's
count per matrix is at most this, so this is its upper bound), a batch of ``--batch`` texts of
``--tokens`` tokens, it alternates in one process

- A, a plain step: every parameter trainable, forward + backward (dense gradients), no optimizer;
- B, a finetune step: :class:`~mathneuro.edit.interventions.sparse.SparseTrainable` over the
  selection (gradients gathered per matrix, the dense one dropped at once), AdamW on the flat vector,
  the vector written back into the selected entries;

``--reps`` times each after one warm-up of each, and prints the median seconds of each and their ratio,
the peak resident memory of each step (``VmHWM``, reset before each) against the weights' bytes, and
the optimizer state in bytes per selected weight. A step's own memory is the peak of anonymous resident
memory during it above what it started with (:class:`AnonPeak`). The selection's other bookkeeping (the flat indices,
the undo's originals, the trainable vector and its gradient) is printed too. Memory freed by a step is
handed back to the OS before the next (``malloc_trim``); for resident peaks that follow live tensors
closely, run it with ``MALLOC_MMAP_THRESHOLD_=65536`` (every large tensor its own mapping, returned
when freed), which costs some speed: time it without.

    .venv/bin/python experiments/benchmarks/bench_finetune.py --threads 1 --dtype float32
    MALLOC_MMAP_THRESHOLD_=65536 .venv/bin/python experiments/benchmarks/bench_finetune.py --threads 1 --reps 1
"""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import json
import platform
import statistics
import threading
import time
from pathlib import Path

import torch

from mathneuro.edit.interventions.sparse import SparseTrainable, make_optimizer, state_bytes
from mathneuro.edit.interventions.units import by_parameter
from mathneuro.models import load_model
from mathneuro.models.targets import find_target_linears, weight_parameters
from mathneuro.util.peak_memory import peak_rss_mb, reset_peak_memory

DEFAULT_MODEL = Path.home() / ".cache/mathneuro-models/qwen2.5-coder-0.5b/model.gguf"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default=str(DEFAULT_MODEL))
    p.add_argument("--dtype", default="float32", choices=["bfloat16", "float32"])
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--top-k", type=float, default=0.05)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--tokens", type=int, default=256)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--out", default=None, help="write the summary JSON here")
    args = p.parse_args(argv)
    if args.reps < 1:
        p.error("--reps: at least 1 (the warm-ups are not counted)")
    return args


def rss_now_mb(field: str = "VmRSS") -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) / 1024
    return float("nan")


class AnonPeak:
    """The peak of anonymous resident memory (``RssAnon``: tensors, not the file-backed pages of mapped
    weights, which the kernel may drop and reread) while inside, sampled every 5 ms by a thread."""

    def __enter__(self) -> AnonPeak:
        self.before = self.peak = rss_now_mb("RssAnon")
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def _sample(self) -> None:
        while not self._stop.wait(0.005):
            self.peak = max(self.peak, rss_now_mb("RssAnon"))

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, rss_now_mb("RssAnon"))


def release_free_memory() -> None:
    """Hand memory freed by the previous step back to the OS (glibc keeps it otherwise), so that each step's
    resident peak is its own live memory, not what the other step left in the allocator's free lists."""
    name = ctypes.util.find_library("c")
    if name:
        try:
            ctypes.CDLL(name).malloc_trim(0)
        except (OSError, AttributeError):
            pass


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    model, _tok = load_model(args.model, dtype=args.dtype, device="cpu")
    weights_mb = sum(p.numel() * p.element_size() for p in model.parameters()) / 2**20
    generator = torch.Generator().manual_seed(0)
    masks = {}
    for name, w in weight_parameters(find_target_linears(model)).items():
        k = int(args.top_k * w.numel())
        mask = torch.zeros(w.numel(), dtype=torch.bool)
        mask[torch.randperm(w.numel(), generator=generator)[:k]] = True
        masks[name] = mask.view(w.shape)
    selected = sum(int(m.sum()) for m in masks.values())
    vocab = model.config.vocab_size
    input_ids = torch.randint(100, min(vocab, 30000), (args.batch, args.tokens), generator=generator)
    labels = input_ids.clone()

    def plain_step() -> None:
        for p in model.parameters():
            p.requires_grad_(True)
        model(input_ids=input_ids, labels=labels, use_cache=False).loss.backward()
        for p in model.parameters():
            p.grad = None
            p.requires_grad_(False)

    entries = by_parameter(model, masks)
    originals_bytes = sum(int(m.sum()) * p.element_size() for _, p, m in entries)  # what the undo keeps
    trainable = SparseTrainable(entries, model)
    optimizer = make_optimizer("adamw", [trainable.vector], 1e-5, 0.0)

    def finetune_step() -> None:
        trainable.zero_grad()
        model(input_ids=input_ids, labels=labels, use_cache=False).loss.backward()
        optimizer.step()
        trainable.write_back()

    def run(step, bucket: dict, label: str) -> None:
        if step is plain_step:
            trainable.detach()  # no gathering hooks in the plain step
        else:
            trainable.attach()
        release_free_memory()
        before = rss_now_mb()
        reset_peak_memory()
        with AnonPeak() as anon:
            t0 = time.perf_counter()
            step()
            bucket.setdefault("seconds", []).append(time.perf_counter() - t0)
        bucket.setdefault("anon_added_mb", []).append(anon.peak - anon.before)
        bucket.setdefault("peak_rss_mb", []).append(peak_rss_mb())
        bucket.setdefault("rss_before_mb", []).append(before)
        print(json.dumps({"step": label, "seconds": round(bucket["seconds"][-1], 3),
                          "peak_rss_mb": bucket["peak_rss_mb"][-1],
                          "rss_before_mb": before, "anon_added_mb": round(anon.peak - anon.before, 1),
                          # each step as it ends: a cut-short run still says
                          "anon_before_mb": round(anon.before, 1)}), flush=True)

    timings: dict[str, dict] = {"plain": {}, "finetune": {}}
    print(json.dumps({"weights_mb": round(weights_mb, 1), "selected": selected}), flush=True)
    run(plain_step, {}, "plain warm-up")
    run(finetune_step, {}, "finetune warm-up")  # the optimizer's state is allocated here
    for _ in range(args.reps):
        run(plain_step, timings["plain"], "plain")
        run(finetune_step, timings["finetune"], "finetune")
    trainable.release()
    state = state_bytes(optimizer)
    index_bytes = sum(s[2].numel() * s[2].element_size() for s in trainable.slices)
    summary = {
        "cpu": cpu_name(), "threads": args.threads, "torch": torch.__version__, "model": args.model,
        "dtype": args.dtype, "top_k": args.top_k, "batch": args.batch, "tokens": args.tokens, "reps": args.reps,
        "parameters": sum(p.numel() for p in model.parameters()), "weights_mb": round(weights_mb, 1),
        "selected": selected,
        "plain_s": round(statistics.median(timings["plain"]["seconds"]), 3),
        "finetune_s": round(statistics.median(timings["finetune"]["seconds"]), 3),
        "plain_peak_rss_mb": round(max(timings["plain"]["peak_rss_mb"]), 1),
        "finetune_peak_rss_mb": round(max(timings["finetune"]["peak_rss_mb"]), 1),
        "rss_before_mb": round(min(timings["plain"]["rss_before_mb"] + timings["finetune"]["rss_before_mb"]), 1),
        "plain_anon_added_mb": round(max(timings["plain"]["anon_added_mb"]), 1),
        "finetune_anon_added_mb": round(max(timings["finetune"]["anon_added_mb"]), 1),
        "optimizer_state_bytes": state, "optimizer_bytes_per_selected": round(state / selected, 3),
        "vector_and_grad_bytes": 2 * 4 * selected, "index_bytes": index_bytes, "undo_originals_bytes": originals_bytes,
        "all_seconds": {k: [round(x, 3) for x in v["seconds"]] for k, v in timings.items()},
    }
    summary["ratio"] = round(summary["finetune_s"] / summary["plain_s"], 3)
    print(json.dumps(summary, indent=2))
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(summary, indent=2) + "\n")
    return summary


if __name__ == "__main__":
    main()
