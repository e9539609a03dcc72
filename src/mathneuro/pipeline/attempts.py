"""What one attempt at a sweep point leaves for the next one, so that a point cut short resumes.

A point may be cut short (a SLURM timeout, a preemption, a killed job) and run again in the same run
directory. The next attempt reuses what the earlier ones finished: the statistics (the cache, and a
pass's checkpoint), the baseline's finished tasks (kept in the cache beside the baseline) and the
edited model's finished tasks, kept in ``<run dir>/.partial/edited-<key>/``. That key is a hash of
everything that defines the edited model's scores: the model's identity, the eval config, the tokens
generation stops at, and the edit itself (every selected weight or neuron, and the scalar), so kept
results never answer for another point. Beside the kept results, ``key.parts`` (JSON) holds that key's parts
(the selection as its digest) and the hardware that computed them, so that an attempt whose key differs
can say why it evaluates those tasks again (:func:`unreused_partials`): most often the selection,
recomputed on another kind of CPU, where bf16 statistics round differently. ``<run dir>/.attempts.json``
(:class:`Attempts`) counts the attempts and what each read back; both are removed once the point's
``results.json`` is written.
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
from mathneuro.models.devices import machine_kind
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


KEY_FILE = "key.parts"  # JSON, named apart from the tasks' *.json files
KEY_PARTS = {"model": "the model", "eval": "the eval config", "generation_eos_ids": "the tokens generation stops at",
             "selection": "the selection", "scalar": "the intervention's settings",
             "log_samples": "eval.log_samples"}


def edit_payload(identity: dict, eval_fingerprint: str, stop_ids: list[int], selection: Any, scalar: Any,
                 log_samples: bool) -> dict[str, Any]:
    """The parts of an edited model's key (see the module docstring), as plain JSON; ``scalar``: the
    intervention's identity (a scale factor, or its settings)."""
    edit = float(scalar) if isinstance(scalar, (int, float)) and not isinstance(scalar, bool) else scalar
    payload = {"model": identity, "eval": eval_fingerprint, "generation_eos_ids": sorted(stop_ids),
               "selection": selection_digest(selection), "scalar": edit, "log_samples": bool(log_samples)}
    return json.loads(json.dumps(payload, sort_keys=True, default=str))


def payload_key(payload: dict[str, Any]) -> str:
    """The key of an :func:`edit_payload`."""
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()


def edit_key(identity: dict, eval_fingerprint: str, stop_ids: list[int], selection: Any, scalar: Any,
             log_samples: bool) -> str:
    """The key of an edited model's kept task results: :func:`payload_key` of :func:`edit_payload`."""
    return payload_key(edit_payload(identity, eval_fingerprint, stop_ids, selection, scalar, log_samples))


def edited_store(run_dir: str | os.PathLike, key: str, *, payload: dict[str, Any] | None = None,
                 hardware: dict[str, Any] | None = None) -> TaskStore:
    """Where the edited model's finished tasks of this run directory are kept; with ``payload`` (the key's
    parts) and ``hardware`` they are written beside them, for :func:`unreused_partials`. Each task is saved
    stamped with ``hardware`` (tasks kept before stamps existed take the one the earlier ``key.parts``
    named), for :func:`computed_elsewhere`."""
    folder = Path(run_dir) / PARTIAL_DIR / f"edited-{key[:24]}"
    earlier: dict[str, Any] | None = None
    try:
        kept = json.loads((folder / KEY_FILE).read_text())
        if kept.get("key") == key and isinstance(kept.get("hardware"), dict) and kept["hardware"]:
            earlier = kept["hardware"]
    except (OSError, ValueError, AttributeError):
        pass
    store = TaskStore(folder, key, stamp={"hardware": hardware} if hardware else None,
                      unstamped={"hardware": earlier} if earlier else None)
    if payload is not None:
        write_json_atomic(store.folder / KEY_FILE, {"key": key, "parts": payload, "hardware": hardware or {}})
    return store


def computed_elsewhere(store: TaskStore, hardware: dict[str, Any]) -> dict[str, str]:
    """``{task: machine}`` for the tasks ``store`` read back that an earlier attempt computed on another kind
    of machine than ``hardware`` (name and CPU flags; "an unrecorded machine" where nothing says): their
    scores carry that machine's rounding, while ``results.json``'s ``hardware`` names this one."""
    here = machine_kind(hardware)
    out = {}
    for task in store.reused:
        there_hw = (store.stamps.get(task) or {}).get("hardware")
        there = machine_kind(there_hw) if isinstance(there_hw, dict) else ""
        if there != here:
            out[task] = there or "an unrecorded machine"
    return out


def _machine(hardware: dict[str, Any]) -> str:
    return machine_kind(hardware) or "an unrecorded machine"


def unreused_partials(run_dir: str | os.PathLike, key: str, payload: dict[str, Any],
                      hardware: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """Finished tasks kept in ``run_dir`` by earlier attempts under another key than ``key``, so evaluated
    again: per kept folder its ``tasks``, which key parts ``differ`` (:data:`KEY_PARTS`'s words; unknown
    for a folder kept before key parts were recorded), the machine that computed them, and a ``reason``
    to log. A differing selection computed on another machine type is most often bf16 rounding there."""
    out = []
    here = _machine(hardware or {})
    for folder in sorted((Path(run_dir) / PARTIAL_DIR).glob("edited-*")):
        tasks = []
        for path in sorted(folder.glob("*.json")):
            try:
                data = json.loads(path.read_text())
            except (OSError, ValueError):
                continue
            if isinstance(data, dict) and data.get("key") != key and isinstance(data.get("task"), str):
                tasks.append(data["task"])
        if not tasks:
            continue
        try:
            kept = json.loads((folder / KEY_FILE).read_text())
            parts, there = kept["parts"], _machine(kept.get("hardware") or {})
        except (OSError, ValueError, KeyError, TypeError):
            parts, there = None, None
        if parts is None:
            differ = ["unknown (kept before key parts were recorded)"]
        else:
            differ = [KEY_PARTS.get(k, k) for k in sorted(set(parts) | set(payload)) if parts.get(k) != payload.get(k)]
        reason = f"{len(tasks)} finished task(s) kept by an earlier attempt ({', '.join(tasks)})"
        reason += f", computed on {there}," if there else ""
        reason += f" are evaluated again: {', '.join(differ) or 'the key'} differ(s) from this attempt's"
        if there and there != here and "the selection" in differ:
            reason += (f" (this attempt runs on {here}; a selection recomputed on another machine type differs "
                       "where bf16 statistics round differently)")
        out.append({"tasks": tasks, "differ": differ, "computed_on": there, "reason": reason})
    return out


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
