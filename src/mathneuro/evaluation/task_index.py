"""Which evaluation task names exist: our table and probes, our local twins, lm-eval's own tasks, the user's YAMLs.

``eval.tasks`` is checked against this index before any model loads. lm-eval's ``TaskManager``
parses every task YAML it ships (~15,000 names, tens of seconds on a small machine), so the names
of lm-eval's own tasks are indexed once per installed lm-eval version and kept on disk (under
``$MATHNEURO_CACHE``, else ``~/.cache/mathneuro``) and in memory for the process; our folder and
the user's ``eval.include_path`` folders are small and indexed afresh (once per process each).
"""

from __future__ import annotations

import difflib
import functools
import hashlib
import json
import logging
import os
import time
from collections.abc import Iterable, Sequence
from pathlib import Path

from mathneuro.evaluation.task_table import TASKS, local_tasks_dir
from mathneuro.util.io import write_text_atomic

log = logging.getLogger(__name__)

CACHE_ENV = "MATHNEURO_CACHE"
INDEX_SECONDS: dict[str, float] = {}  # what building each index took in this process (seconds), for reports


def start_dir() -> Path:
    """The directory the command was started in: Hydra's original cwd when Hydra runs, else the cwd."""
    try:
        from hydra.core.hydra_config import HydraConfig

        if HydraConfig.initialized():
            return Path(HydraConfig.get().runtime.cwd)
    except Exception:  # Hydra absent or not configured: plain Python use
        pass
    return Path(os.getcwd())


def include_paths(value: str | Sequence[str] | None, base: str | Path | None = None) -> list[Path]:
    """``eval.include_path`` (one folder or a list) as absolute paths, relative ones resolved against ``base``
    (default: :func:`start_dir`)."""
    if value is None or value == "":
        return []
    items = [value] if isinstance(value, (str, Path)) else list(value)
    root = Path(base) if base is not None else start_dir()
    out = []
    for item in items:
        path = Path(str(item)).expanduser()
        out.append((path if path.is_absolute() else root / path).resolve())
    return out


def _names_under(folders: Iterable[Path]) -> dict[str, str]:
    """``{name: kind}`` (``task``, ``group`` or ``tag``) of every task YAML under ``folders``."""
    from lm_eval.tasks._index import Kind, TaskIndex

    kinds = {Kind.TASK: "task", Kind.PY_TASK: "task", Kind.GROUP: "group", Kind.TAG: "tag"}
    index = TaskIndex.build([Path(f) for f in folders])
    return {name: kinds.get(entry.kind, "task") for name, entry in index.items()}


def _folder_key(folder: Path) -> str:
    """A key that changes when any file under ``folder`` is added, removed or modified (stats only: fast)."""
    digest = hashlib.sha256(str(folder).encode())
    for path in sorted(folder.glob("**/*.yaml")):
        stat = path.stat()
        digest.update(f"{path}:{stat.st_size}:{stat.st_mtime_ns}".encode())
    return digest.hexdigest()[:16]


@functools.cache
def _folder_names(folders: tuple[str, ...]) -> dict[str, str]:
    """``{name: kind}`` under each folder (later folders win), disk-cached per folder state."""
    start = time.perf_counter()
    names: dict[str, str] = {}
    for folder in map(Path, folders):
        names.update(_cached_names(_cache_root() / "folders" / f"{_folder_key(folder)}.json",
                                   lambda folder=folder: _names_under([folder])))
    INDEX_SECONDS[f"folders:{len(folders)}"] = time.perf_counter() - start
    return names


def _cache_root() -> Path:
    from importlib.metadata import version

    root = Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "mathneuro")
    return root / "lm_eval_task_index" / version("lm_eval")


def _cached_names(path: Path, build) -> dict[str, str]:
    """The names stored at ``path``, else ``build()`` written there (atomically; failures only cost time)."""
    if path.is_file():
        try:
            return json.loads(path.read_text())["names"]
        except (ValueError, KeyError):
            pass  # a damaged cache file: rebuild it
    names = build()
    try:
        write_text_atomic(path, json.dumps({"names": names}))
    except OSError as exc:
        log.warning("could not cache a task index at %s (%s)", path, exc)
    return names


def _lm_eval_tasks_dir() -> Path:
    import importlib.util

    spec = importlib.util.find_spec("lm_eval")  # found, not imported: importing lm-eval takes seconds
    if spec is None or not spec.submodule_search_locations:
        raise ValueError("eval.tasks: lm-eval is not installed (pip install lm-eval)")
    return Path(next(iter(spec.submodule_search_locations))).resolve() / "tasks"


@functools.cache
def lm_eval_task_names() -> dict[str, str]:
    """``{name: kind}`` of every task, group and tag lm-eval ships (disk-cached per lm-eval version)."""
    tasks_dir = _lm_eval_tasks_dir()
    path = _cache_root() / f"lm_eval-{hashlib.sha256(str(tasks_dir).encode()).hexdigest()[:12]}.json"
    start = time.perf_counter()
    if not path.is_file():
        log.info("indexing lm-eval's task YAMLs once for this lm-eval version (cached at %s)", path)
    names = _cached_names(path, lambda: _names_under([tasks_dir]))
    INDEX_SECONDS["lm_eval"] = time.perf_counter() - start
    return names


def local_task_names(extra: Sequence[Path] = ()) -> dict[str, str]:
    """``{name: kind}`` under our local task folder and the given include paths (later ones win)."""
    return _folder_names(tuple(str(p) for p in [local_tasks_dir(), *extra]))


def known_task_names(extra: Sequence[Path] = ()) -> set[str]:
    """Every name ``eval.tasks`` accepts: our table and probes, our twins, lm-eval's tasks, ``extra`` folders."""
    return set(TASKS) | set(local_task_names(extra)) | set(lm_eval_task_names())


def needs_lm_eval_tasks(names: Iterable[str], extra: Sequence[Path] = ()) -> bool:
    """Whether running ``names`` (lm-eval names, not our table's) needs lm-eval's own task folder indexed."""
    local = local_task_names(extra)
    return any(name not in local for name in names)


def suggestion(name: str, known: Iterable[str]) -> str:
    """``"; did you mean arc_easy?"`` with the closest known name, or a hint where to look."""
    close = difflib.get_close_matches(name, sorted(known), n=1, cutoff=0.6)
    if close:
        return f"; did you mean {', '.join(close)}?"
    return "; list lm-eval's tasks with `lm-eval ls tasks`, or add your YAML folder to eval.include_path"


def check_task_names(tasks: Sequence[str], extra: Sequence[Path] = (), key: str = "eval.tasks") -> None:
    """Raise ``ValueError`` (one line: key, bad name, closest names) for the first name nobody knows.

    Names in our table cost nothing; others look in our and the user's folders first (small), and
    only then in lm-eval's index (disk-cached).
    """
    unknown = [t for t in tasks if t not in TASKS]
    if not unknown:
        return
    local = local_task_names(extra)
    unknown = [t for t in unknown if t not in local]
    if not unknown:
        return
    stock = lm_eval_task_names()
    for task in unknown:
        if task not in stock:
            known = set(TASKS) | set(local) | set(stock)
            raise ValueError(f"{key}: unknown task {task!r}{suggestion(task, known)}")
