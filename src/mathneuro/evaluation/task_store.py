"""Each evaluated task's result kept on disk as it completes, so an evaluation cut short resumes.

An evaluation runs its tasks one after another. :class:`TaskStore` holds one JSON file per finished
task in a folder, each written atomically and stamped with the store's ``key``: whatever defines the
scores (for an edited model: the model, the eval config and the edit itself). A later attempt of
the same evaluation (a requeued SLURM job) reads the finished tasks back instead of evaluating them
again. A file that cannot be read, or that carries another key or task, is a miss, with a one-line
warning, and that task is evaluated again. The owner deletes the folder once the whole evaluation
is recorded.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import shutil
from pathlib import Path
from typing import Any

from mathneuro.util.io import write_json_atomic

FORMAT = 1
log = logging.getLogger("mathneuro")


class TaskStore:
    """Finished tasks of one evaluation, keyed by ``key``, in ``folder`` (one ``<task>.json`` each)."""

    def __init__(self, folder: str | Path, key: str, stamp: dict[str, Any] | None = None,
                 unstamped: dict[str, Any] | None = None):
        self.folder = Path(folder)
        self.key = str(key)
        self.stamp = stamp  # written beside each result (who computed it: the machine), not part of the key
        self.unstamped = unstamped  # what a result saved without a stamp is taken to carry
        self.reused: list[str] = []  # tasks read back by this process
        self.stamps: dict[str, dict[str, Any] | None] = {}  # the stamp each read-back task was saved with

    def path(self, task: str) -> Path:
        """The file of ``task`` (its name made safe, plus a short hash so distinct names stay distinct)."""
        safe = re.sub(r"[^A-Za-z0-9_.-]", "_", task)[:80]
        return self.folder / f"{safe}-{hashlib.sha1(task.encode()).hexdigest()[:8]}.json"

    def load(self, task: str) -> dict[str, Any] | None:
        """The kept result of ``task`` (``values``, ``subtasks``, ``samples``, ``num_examples``, ``seconds``) or
        None."""
        path = self.path(task)
        if not path.exists():
            return None
        try:
            data = json.loads(path.read_text())
            if data.get("format") != FORMAT or data.get("key") != self.key or data.get("task") != task:
                raise ValueError("it was kept for another evaluation")
            result = data["result"]
            values = result["values"]
            if not isinstance(values, dict) or not all(isinstance(v, (int, float)) or v is None
                                                       for v in values.values()):
                raise ValueError("its values are not numbers")
            if not isinstance(result.get("subtasks", {}), dict) or not isinstance(result.get("samples", {}), dict):
                raise ValueError("its subtasks or samples are malformed")
        except Exception as exc:  # noqa: BLE001 - truncated, foreign or malformed: evaluate the task again
            reason = " ".join(str(exc).split()) or type(exc).__name__
            log.warning("kept evaluation result %s is damaged or does not match (%s); evaluating %s again",
                        path, reason, task)
            return None
        self.reused.append(task)
        self.stamps[task] = data["stamp"] if isinstance(data.get("stamp"), dict) else self.unstamped
        nan = float("nan")  # JSON has no NaN: it was written as null
        result["values"] = {k: nan if v is None else v for k, v in values.items()}
        result["subtasks"] = {sub: {k: nan if v is None else v for k, v in vals.items()}
                              for sub, vals in (result.get("subtasks") or {}).items()}
        return result

    def save(self, task: str, result: dict[str, Any]) -> None:
        """Keep ``task``'s finished ``result`` (atomically), with the store's ``stamp``."""
        data = {"format": FORMAT, "key": self.key, "task": task, "result": result}
        if self.stamp is not None:
            data["stamp"] = self.stamp
        write_json_atomic(self.path(task), data)

    def clear(self) -> None:
        """Delete every kept result (the evaluation they belong to is recorded)."""
        shutil.rmtree(self.folder, ignore_errors=True)
