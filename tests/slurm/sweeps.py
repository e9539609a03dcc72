"""Helpers of the ``slurm`` tier: start a sweep through ``hydra/launcher=slurm``, watch its files, size its work."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM

from mathneuro.models.tiny import byte_tokenizer, tiny_config
from mathneuro.statistics.passes import collect_statistics

BATCH, MAX_LENGTH = 4, 128  # small batches: frequent boundaries to checkpoint at
REPO = Path(__file__).resolve().parents[2]


def launcher_args(partition: str, **extra) -> list[str]:
    """Our launcher config on the test cluster: no GPUs, one CPU and a little memory per job."""
    args = ["hydra/launcher=slurm", f"hydra.launcher.partition={partition}", "hydra.launcher.gpus_per_node=0",
            "hydra.launcher.cpus_per_task=1", "hydra.launcher.mem_gb=4"]
    return args + [f"hydra.launcher.{k}={v}" for k, v in extra.items()]


def start_sweep(cluster, args: list[str], cwd: Path, extra_env: dict | None = None) -> subprocess.Popen:
    """``mathneuro -m <args>`` in the background, with the cluster in its environment (jobs inherit it)."""
    path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)  # jobs import tests.*
    env = {**os.environ, **cluster.env, "HYDRA_FULL_ERROR": "1", "HF_HUB_OFFLINE": "1", "WANDB_MODE": "offline",
           "PYTHONUNBUFFERED": "1", "PYTHONPATH": path, **(extra_env or {})}
    out = open(cwd / "sweep.out", "w")  # noqa: SIM115 - the child writes it
    return subprocess.Popen([sys.executable, "-m", "mathneuro", "-m", *args], cwd=cwd, env=env, stdout=out,
                            stderr=subprocess.STDOUT, text=True)


def finish(proc: subprocess.Popen, cwd: Path, timeout: float) -> str:
    """Wait for the sweep to end (killing it after ``timeout`` s); its output."""
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    return (cwd / "sweep.out").read_text()


def wait_for(what: str, ready: Callable[[], object], proc: subprocess.Popen, timeout: float, poll: float = 0.1):
    """Poll ``ready()`` until it returns something truthy (returned); fail if the sweep ends first or on timeout."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = ready()
        if value:
            return value
        if proc.poll() is not None:
            raise AssertionError(f"the sweep ended (code {proc.returncode}) before {what}")
        time.sleep(poll)
    raise AssertionError(f"no {what} after {timeout:.0f} s")


def lock_holders(folder: Path) -> list[dict]:
    """What the lock files in ``folder`` say about their holders (host, pid, SLURM job)."""
    out = []
    for path in folder.glob("*.lock"):
        try:
            out.append(json.loads(path.read_text()))
        except (OSError, ValueError):
            pass
    return out


def leftovers(sweep: Path, cache: Path) -> list[str]:
    """Anything partial a finished sweep left: temp files, locks, checkpoints, kept partial results."""
    patterns = [(sweep, "**/*.tmp"), (sweep, "**/.partial"), (sweep, "**/.attempts.json"), (sweep, "**/.running.lock"),
                (cache, "**/*.tmp"), (cache, "**/*.lock"), (cache, "statistics/partial/*"),
                (cache, "statistics/baselines/*.tasks")]
    return sorted(str(p) for root, pattern in patterns for p in root.glob(pattern))


def save_medium_model(folder: Path) -> Path:
    """A random 4-layer llama (hidden 256) with the byte tokenizer, saved into ``folder``."""
    tok = byte_tokenizer()
    config = tiny_config("llama", len(tok), hidden_size=256, intermediate_size=768, num_hidden_layers=4,
                         num_attention_heads=8, num_key_value_heads=4, max_position_embeddings=1024)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config).eval()
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


def fastest_batch(folder: Path, batches: int = 6) -> float:
    """The fastest of a few statistics batches (``BATCH`` x 128 tokens) of the model in ``folder`` here now,
    in seconds: what sizes a pass that must outlast a moment even when the machine is at its quickest."""
    model = AutoModelForCausalLM.from_pretrained(folder).eval()
    tok = byte_tokenizer()
    texts = ["x" * 400] * BATCH
    times = []
    for _ in range(batches):
        start = time.perf_counter()
        collect_statistics(model, tok, texts, batch_size=BATCH, max_length=MAX_LENGTH, progress=False)
        times.append(time.perf_counter() - start)
    return min(times[1:])


def samples_outlasting(seconds: float, per_batch: float, least_batches: int = 16) -> int:
    """Samples (of 128 tokens) for a statistics pass that lasts at least ``seconds`` at ``per_batch``."""
    return BATCH * max(least_batches, math.ceil(seconds / per_batch))
