"""Stage 9 (after the report, 8), the command line, on top of everything: :mod:`~mathneuro.cli.run` (``mathneuro``, one sweep
point per Hydra job), :mod:`~mathneuro.cli.report` (``mathneuro-report``, ``mathneuro-overlap``),
:mod:`~mathneuro.cli.callbacks` (Hydra callbacks: the sweep's checks before, its report after) and
:mod:`~mathneuro.cli.sweep_status` (the line a sweep ends with). Nothing below imports this package.

``mathneuro.cli`` was the ``mathneuro`` command's module before 0.2; its names (``main``...) are still
handed out from :mod:`~mathneuro.cli.run`, with a :class:`DeprecationWarning`, for one release.
"""

from __future__ import annotations

import importlib
import warnings


def __getattr__(name: str):
    if name.startswith("__"):
        raise AttributeError(name)
    run = importlib.import_module("mathneuro.cli.run")
    if not hasattr(run, name):
        raise AttributeError(f"module 'mathneuro.cli' has no attribute {name!r}")
    warnings.warn(f"mathneuro.cli.{name} moved to mathneuro.cli.run.{name}; the old name goes in the next release",
                  DeprecationWarning, stacklevel=2)
    return getattr(run, name)
