"""What one attempt at a sweep point leaves for the next one, so that a point cut short resumes.

A point may be cut short (a SLURM timeout, a preemption, a killed job) and run again in the same run
directory. The next attempt reuses what the earlier ones finished: the statistics (the cache, and a
pass's checkpoint), the baseline's finished tasks (kept in the cache beside the baseline) and the
edited model's finished tasks, kept in ``<run dir>/.partial/edited-<key>/``. That key is a hash of
everything that defines the edited model's scores: the model's identity, the eval config, the tokens
generation stops at, and the edit itself (every selected weight or neuron, and the scalar), so kept
results never answer for another point. ``<run dir>/.attempts.json`` (:class:`Attempts`) counts the
attempts and what each read back; both are removed once the point's ``results.json`` is written.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
import time
from pathlib import Path
from typing import Any

import numpy as np

from mathneuro.evaluation.task_store import TaskStore
from mathneuro.pipeline.cluster import cluster_info
from mathneuro.util.io import write_json_atomic

ATTEMPTS_FILE = ".attempts.json"
PARTIAL_DIR = ".partial"


def selection_digest(selection: Any) -> str:
    """sha256 of a selection's content: every mask's name, shape and bits, every neuron index."""
    h = hashlib.sha256()
    for name in sorted(selection.masks):
        mask = selection.masks[name].detach().to("cpu").bool()
        h.update(f"mask:{name}:{list(mask.shape)}".encode())
        h.update(np.packbits(mask.reshape(-1).numpy()).tobytes())
    for name in sorted(selection.neurons):
        idx = selection.neurons[name].detach().to("cpu").long()
        h.update(f"neurons:{name}:{idx.numel()}".encode())
        h.update(idx.numpy().astype("<i8").tobytes())
    return h.hexdigest()


def edit_key(identity: dict, eval_fingerprint: str, stop_ids: list[int], selection: Any, scalar: Any,
             log_samples: bool) -> str:
    """The key of an edited model's kept task results (see the module docstring); ``scalar``: the
    intervention's identity (a scale factor, or its settings)."""
    edit = float(scalar) if isinstance(scalar, (int, float)) and not isinstance(scalar, bool) else scalar
    payload = {"model": identity, "eval": eval_fingerprint, "generation_eos_ids": sorted(stop_ids),
               "selection": selection_digest(selection), "scalar": edit, "log_samples": bool(log_samples)}
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()


def edited_store(run_dir: str | os.PathLike, key: str) -> TaskStore:
    """Where the edited model's finished tasks of this run directory are kept."""
    return TaskStore(Path(run_dir) / PARTIAL_DIR / f"edited-{key[:24]}", key)


class Attempts:
    """The attempts at one point, in ``<run dir>/.attempts.json``: when and where each started, and what it
    read back from the attempts before it (statistics batches, evaluated tasks), so that the attempt that
    completes the point can report all of it. Only the holder of the point's claim writes it."""

    def __init__(self, run_dir: str | os.PathLike):
        self.path = Path(run_dir) / ATTEMPTS_FILE
        self.history: list[dict[str, Any]] = []

    def start(self) -> int:
        """Record a new attempt; its number (1 for the first)."""
        try:
            history = json.loads(self.path.read_text())["attempts"]
            self.history = [h for h in history if isinstance(h, dict)] if isinstance(history, list) else []
        except (OSError, ValueError, KeyError, TypeError):
            self.history = []  # none yet, or damaged: count from here
        self.history.append({"started": time.time(), "host": socket.gethostname(), "pid": os.getpid(),
                             "cluster": cluster_info(), "resumed": {}})
        self._write()
        return len(self.history)

    @property
    def count(self) -> int:
        return len(self.history)

    def run_id(self) -> str:
        """An id shared by every attempt at this point, new for a point run again after it completed (the
        W&B run id: all attempts log into one W&B run)."""
        first = self.history[0] if self.history else {}
        seed = f"{self.path.parent.resolve()}|{first.get('started')}|{first.get('host')}|{first.get('pid')}"
        return hashlib.sha256(seed.encode()).hexdigest()[:16]

    def note(self, what: str, items: list) -> None:
        """Add ``items`` read back from earlier attempts under ``what`` (``statistics``, ``baseline_tasks``,
        ``edited_tasks``) to this attempt's record."""
        if not items or not self.history:
            return
        self.history[-1]["resumed"].setdefault(what, []).extend(items)
        self._write()

    def resumed(self) -> dict[str, list] | None:
        """What the attempts read back, over all of them (None if nothing): ``statistics`` entries with their
        ``resumed_batches`` and ``attempt``; ``baseline_tasks`` / ``edited_tasks``: task names."""
        out: dict[str, list] = {}
        for number, attempt in enumerate(self.history, 1):
            for what, items in (attempt.get("resumed") or {}).items():
                for item in items:
                    item = {**item, "attempt": number} if isinstance(item, dict) else item
                    if item not in out.setdefault(what, []):
                        out[what].append(item)
        return out or None

    def _write(self) -> None:
        write_json_atomic(self.path, {"attempts": self.history})


def clear_attempts(run_dir: str | os.PathLike) -> None:
    """Drop the attempt count and the kept partial results of a point whose results are written."""
    (Path(run_dir) / ATTEMPTS_FILE).unlink(missing_ok=True)
    shutil.rmtree(Path(run_dir) / PARTIAL_DIR, ignore_errors=True)
