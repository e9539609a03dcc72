"""Atomic file writes: a reader sees the old file or the whole new one, never half of it (results,
caches and selections are read by other processes of a sweep while they are written).

Every file written here gets the mode an ordinary ``open()`` would give it (``0o666`` less the
process's umask: group-readable under 022, group-writable under 002), not ``mkstemp``'s owner-only
600, so a cache or a sweep folder can be shared by a group (docs/scale-out.md). A write that fails
(disk full, read-only file system, no permission) removes its temp file and raises the ``OSError``
with the path it was writing.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
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


def current_umask() -> int:
    """The process's umask, read without changing it where Linux tells it (``/proc/self/status``)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)  # elsewhere: set and restore (not thread-safe, but only where /proc is absent)
    os.umask(mask)
    return mask


def file_mode() -> int:
    """The mode a new file gets from ``open()``: ``0o666`` less the umask."""
    return 0o666 & ~current_umask()


def publish_folder(tmp: str | os.PathLike, dest: str | os.PathLike, *, replace: bool = False) -> Path:
    """Give the folder ``tmp`` (built beside ``dest``) and everything in it the umask's modes (a folder
    made by ``mkdtemp`` or a file by safetensors would be owner-only), sync its files, then rename it to
    ``dest``: ``dest`` is whole or absent. ``replace``: an existing ``dest`` is removed first (else the
    rename fails if it holds anything: the caller decides whether another process's copy will do)."""
    tmp, dest = Path(tmp), Path(dest)
    mode = file_mode()
    for path in [tmp, *tmp.rglob("*")]:
        if path.is_dir():
            os.chmod(path, (0o777 & ~current_umask()) | (os.stat(path).st_mode & 0o2000))
        else:
            os.chmod(path, mode)
            _fsync_file(str(path))
    if replace and dest.exists():
        shutil.rmtree(dest)
    os.rename(tmp, dest)
    return dest


def atomic_write(path: str | os.PathLike, write: Callable[[str], None]) -> None:
    """Call ``write(tmp)`` on a temp file beside ``path``, then rename it over ``path``: readers see the
    old file or the whole new one, never half of it. The file gets :func:`file_mode` (the umask's mode)
    and is synced to disk before the rename; the temp file is removed on failure, and an ``OSError``
    without a file name gets ``path``'s (so that the one error line can name it)."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as exc:
        raise _with_path(exc, path.parent) from None
    try:
        os.close(fd)
        write(tmp)
        os.chmod(tmp, file_mode())  # after the write: a writer may replace the file (safetensors does)
        _fsync_file(tmp)
        os.replace(tmp, path)
    except OSError as exc:
        raise _with_path(exc, path) from None
    except Exception as exc:  # a writer's own error around an OS error (safetensors: "... (os error 28)")
        os_error = os_error_inside(exc, path)
        if os_error is None:
            raise
        raise os_error from exc
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _fsync_file(path: str) -> None:
    """Flush ``path``'s data to disk (a crash after the rename then never leaves an empty file)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _with_path(exc: OSError, path: Path) -> OSError:
    """``exc`` naming ``path`` when it names no file (safetensors, a failed write of an open file)."""
    if getattr(exc, "filename", None) is None:
        return OSError(exc.errno, exc.strerror or str(exc), str(path))  # OSError picks the errno's subclass
    return exc


def os_error_inside(exc: Exception, path: Path) -> OSError | None:
    """The OSError a library's exception wraps (its message ends ``(os error N)``), naming ``path``."""
    found = re.search(r"os error (\d+)", str(exc))
    if found is None:
        return None
    errno = int(found.group(1))
    return OSError(errno, os.strerror(errno), str(path))


def write_text_atomic(path: str | os.PathLike, text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` atomically (see :func:`atomic_write`)."""
    def write(tmp: str) -> None:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)

    atomic_write(path, write)


def remove_orphaned_temps(path: str | os.PathLike) -> None:
    """Delete the temp files :func:`atomic_write` left beside ``path`` when its process was killed mid-write
    (SIGKILL skips the cleanup). Only for a caller no other process can be writing ``path`` beside (one
    holding its lock): a temp file being written is indistinguishable from an orphan."""
    path = Path(path)
    for tmp in path.parent.glob(f".{path.name}.*.tmp"):
        tmp.unlink(missing_ok=True)


_TEMP_NAME = re.compile(r"^\..+\.[a-z0-9_]{8}\.tmp$")  # what atomic_write's mkstemp names: .<name>.<8 chars>.tmp


def remove_orphaned_temps_under(folder: str | os.PathLike, skip: tuple[str, ...] = ("wandb",)) -> list[Path]:
    """Delete every temp file of :func:`atomic_write` under ``folder`` (``skip``: subfolders left alone);
    for a caller that holds the folder's claim, once its own writes are done. Returns what it removed."""
    removed = []
    for root, dirs, files in os.walk(folder):
        dirs[:] = [d for d in dirs if d not in skip]
        for name in files:
            if _TEMP_NAME.match(name):
                path = Path(root) / name
                path.unlink(missing_ok=True)
                removed.append(path)
    return removed


def write_json_atomic(path: str | os.PathLike, data: dict) -> None:
    """Write ``data`` as JSON to ``path`` atomically (and synced to disk)."""
    def write(tmp: str) -> None:
        with open(tmp, "w") as f:
            json.dump(_jsonable(data), f, indent=1, default=str)

    atomic_write(path, write)
