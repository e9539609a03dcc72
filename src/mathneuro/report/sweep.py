"""Reading a sweep: every job dir of a Hydra multirun, its ``results.json`` or why it is missing."""

from __future__ import annotations

import os
import re
from pathlib import Path

from mathneuro.results.schema import PointResult, read_json

_SKIP_DIRS = {".hydra", "wandb", "report", "__pycache__"}


def _natural_key(path: Path) -> list:
    return [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", str(path))]


def _is_job_dir(path: Path) -> bool:
    return (path / ".hydra").is_dir() or (path / "results.json").is_file()


def _job_dirs(sweep_dir: Path) -> list[Path]:
    found = []
    for root, dirs, _files in os.walk(sweep_dir):
        dirs[:] = [d for d in dirs if d not in _SKIP_DIRS and not d.startswith(".")]
        here = Path(root)
        if _is_job_dir(here):
            found.append(here)
    return sorted(found, key=_natural_key)


def _overrides(job_dir: Path) -> list[str]:
    path = job_dir / ".hydra" / "overrides.yaml"
    if not path.is_file():
        return []
    try:
        import yaml

        data = yaml.safe_load(path.read_text())
    except Exception:  # noqa: BLE001 - a broken overrides file only loses the hint
        return []
    return [str(x) for x in data] if isinstance(data, list) else []


def load_results(sweep_dir: str | Path) -> tuple[list[dict], list[dict]]:
    """Read every job dir of a sweep: ``(complete, missing)``.

    A job dir is any directory (the sweep dir itself included) holding ``.hydra/`` or
    ``results.json``. Complete results get ``_dir`` (absolute path) and ``_job`` (path relative to
    the sweep dir). Each missing/incomplete entry has ``path``, ``job``, ``reason`` (no results.json,
    unreadable JSON, status != complete, missing fields) and ``overrides`` (from
    ``.hydra/overrides.yaml``) plus ``point`` when the file gives one."""
    sweep = Path(sweep_dir)
    if not sweep.is_dir():
        raise FileNotFoundError(f"sweep directory not found: {sweep}")
    complete: list[dict] = []
    missing: list[dict] = []
    for job in _job_dirs(sweep):
        rel = "." if job == sweep else job.relative_to(sweep).as_posix()
        entry = {"path": str(job), "job": rel, "overrides": _overrides(job)}
        path = job / "results.json"
        if not path.is_file():
            missing.append({**entry, "reason": "no results.json"})
            continue
        try:
            data = read_json(path)
        except (OSError, ValueError) as err:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
            missing.append({**entry, "reason": f"unreadable JSON: {err}"})
            continue
        if isinstance(data.get("point"), dict):
            entry["point"] = data["point"]
        status = data.get("status")
        if status != "complete":
            missing.append({**entry, "reason": f"status={status!r}, not 'complete'"})
            continue
        absent = [k for k in ("point", "metrics") if not isinstance(data.get(k), dict)]
        if absent:
            missing.append({**entry, "reason": f"missing fields: {', '.join(absent)}"})
            continue
        complete.append({**PointResult.from_json(data).to_json(), "_dir": str(job), "_job": rel})
    return complete, missing
