"""Which code made a number: mathneuro's version, the git commit it ran from, the libraries, the tasks.

``results.json`` carries :func:`provenance` as ``provenance`` and the W&B run as config ``provenance``:

- ``version``: :data:`mathneuro.__version__`, the one place the version is written (pyproject reads it);
- ``git``: ``{"commit", "dirty"}`` of the checkout mathneuro was imported from, None for an installed wheel
  (or without git); ``dirty`` is true when tracked files differ from the commit;
- ``packages``: the versions of Python, torch, transformers, lm-eval, Hydra, W&B and datasets;
- ``tasks``: per evaluated task, lm-eval's version of the task, its number of few-shot examples and
  each metric's direction (``higher_is_better``); the built-in probes say ``"source": "probe"``.
"""

from __future__ import annotations

import functools
import importlib.metadata as md
import platform
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from mathneuro import __version__
from mathneuro.evaluation.directions import higher_is_better

PACKAGES = ("torch", "transformers", "lm_eval", "hydra-core", "wandb", "datasets")


def package_versions() -> dict[str, str]:
    """``{"mathneuro", "python", "torch", "transformers", "lm_eval", "hydra-core", "wandb", "datasets"}``
    (a package that is not installed is left out)."""
    out = {"mathneuro": __version__, "python": platform.python_version()}
    for pkg in PACKAGES:
        try:
            out[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            pass
    return out


def _git(args: list[str], cwd: Path) -> str | None:
    try:
        done = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


@functools.lru_cache(maxsize=4)
def git_state(source: str | None = None) -> dict[str, Any] | None:
    """``{"commit": <sha>, "dirty": bool}`` of the git checkout holding ``source`` (default: this package),
    when that checkout is mathneuro's own (its top holds a pyproject.toml naming mathneuro); else None."""
    here = Path(source) if source else Path(__file__).resolve().parent
    top = _git(["rev-parse", "--show-toplevel"], here)
    if not top:
        return None
    pyproject = Path(top) / "pyproject.toml"
    try:
        if 'name = "mathneuro"' not in pyproject.read_text(encoding="utf-8"):
            return None  # an installed copy inside some other repository
    except OSError:
        return None
    commit = _git(["rev-parse", "HEAD"], Path(top))
    if not commit:
        return None
    status = _git(["status", "--porcelain", "--untracked-files=no"], Path(top))
    return {"commit": commit, "dirty": bool(status)}


def metric_direction(metric: str, tasks: Mapping[str, Any] | None = None) -> str:
    """``"up"`` or ``"down"``: which way ``<side>/<task>/<metric>`` improves, from the task's own
    ``higher_is_better`` (:func:`provenance`'s ``tasks``) when it gives one, else by name."""
    parts = metric.split("/")
    name = parts[-1]
    if len(parts) >= 3 and tasks:
        info = tasks.get(parts[-2]) or {}
        base = name.split(",", 1)[0]
        told = (info.get("higher_is_better") or {}).get(base)
        if isinstance(told, bool) and not name.endswith("_stderr"):
            return "up" if told else "down"
    return "up" if higher_is_better(name) else "down"


def provenance(tasks: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The ``provenance`` block of ``results.json`` (see the module docstring)."""
    return {"version": __version__, "git": git_state(), "packages": package_versions(),
            "tasks": {k: dict(v) for k, v in sorted((tasks or {}).items())}}
