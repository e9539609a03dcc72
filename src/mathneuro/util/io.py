"""Atomic file writes: a reader sees the old file or the whole new one, never half of it (results,
caches and selections are read by other processes of a sweep while they are written)."""

from __future__ import annotations

import json
import math
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any


def _jsonable(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return value


def atomic_write(path: str | os.PathLike, write: Callable[[str], None]) -> None:
    """Call ``write(tmp)`` on a temp file beside ``path``, then rename it over ``path``: readers see the
    old file or the whole new one, never half of it; the temp file is removed on failure."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def remove_orphaned_temps(path: str | os.PathLike) -> None:
    """Delete the temp files :func:`atomic_write` left beside ``path`` when its process was killed mid-write
    (SIGKILL skips the cleanup). Only for a caller no other process can be writing ``path`` beside (one
    holding its lock): a temp file being written is indistinguishable from an orphan."""
    path = Path(path)
    for tmp in path.parent.glob(f".{path.name}.*.tmp"):
        tmp.unlink(missing_ok=True)


def write_json_atomic(path: str | os.PathLike, data: dict) -> None:
    """Write ``data`` as JSON to ``path`` atomically (and synced to disk)."""
    def write(tmp: str) -> None:
        with open(tmp, "w") as f:
            json.dump(_jsonable(data), f, indent=1, default=str)
            f.flush()
            os.fsync(f.fileno())

    atomic_write(path, write)
