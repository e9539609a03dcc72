"""Where a sweep point's per-example records are (``results["samples"]``) and what one records file holds."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mathneuro.data.datasets import read_jsonl


def read_records(path: str | Path) -> dict[Any, dict[str, float]]:
    """``{doc_id: {metric: value}}`` of one ``samples/<task>.jsonl`` (numeric fields only; booleans
    count as 0/1; a doc_id seen twice keeps the mean of its values). A group's pooled records
    (with ``subtask``) are keyed by ``(subtask, doc_id)``."""
    sums: dict[Any, dict[str, list[float]]] = {}
    for index, item in enumerate(read_jsonl(path, "samples")):
        try:
            doc = int(item["doc_id"])
            if "subtask" in item:
                doc = (str(item["subtask"]), doc)
        except (KeyError, TypeError, ValueError) as err:
            raise ValueError(f"{path}: record {index + 1}: not a per-example record with a doc_id ({err})") from None
        slot = sums.setdefault(doc, {})
        for key, value in item.items():
            if key == "doc_id" or key.endswith("_stderr") or isinstance(value, str):
                continue
            if isinstance(value, (bool, int, float)) and math.isfinite(float(value)):
                slot.setdefault(key, []).append(float(value))
    return {doc: {k: sum(v) / len(v) for k, v in metrics.items()} for doc, metrics in sums.items()}


@dataclass
class PointRecords:
    """One sweep point's per-example records: where they are and which tasks they cover."""

    result: Mapping
    samples_dir: Path
    baseline_dir: Path | None
    tasks: dict[str, str]  # task -> side (math / nonmath / "")
    _cache: dict = field(default_factory=dict)

    def path(self, name: str, *, baseline: bool = False) -> Path | None:
        """The records file of task ``name`` (the baseline's with ``baseline=True``); None without a folder."""
        folder = self.baseline_dir if baseline else self.samples_dir
        return None if folder is None else folder / f"{name}.jsonl"

    def task(self, name: str, *, baseline: bool = False) -> dict[int, dict[str, float]] | None:
        """Records of task ``name`` (the baseline's with ``baseline=True``); None when absent."""
        path = self.path(name, baseline=baseline)
        if path is None:
            return None
        if path not in self._cache:
            self._cache[path] = read_records(path) if path.is_file() else None
        return self._cache[path]


def point_records(result: Mapping) -> PointRecords | None:
    """Where ``result``'s per-example records are (``results["samples"]``), or None without any."""
    info = result.get("samples")
    run_dir = Path(str(result.get("_dir", ".")))
    if not isinstance(info, Mapping):
        return None
    samples_dir = run_dir / str(info.get("dir") or "samples")
    if not samples_dir.is_dir():
        return None
    base = info.get("baseline_dir")
    baseline_dir = (run_dir / str(base)) if base else None  # an absolute path stays absolute
    tasks = info.get("tasks")
    if isinstance(tasks, Mapping) and tasks:
        names = {str(k): str(v or "") for k, v in tasks.items()}
    else:
        names = {p.stem: "" for p in sorted(samples_dir.glob("*.jsonl"))}
    if not names:
        return None
    return PointRecords(result, samples_dir, baseline_dir, names)


__all__ = ["PointRecords", "point_records", "read_records"]
