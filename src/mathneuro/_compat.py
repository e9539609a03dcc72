"""Old import paths of modules that moved into stage packages, kept for one release (see CHANGELOG.md).

``import mathneuro.runner`` still works: the alias finder below hands out the module now at
``mathneuro.pipeline.runner`` (the same object, so patching one patches the other) and warns once
with a :class:`DeprecationWarning`. ``python -m mathneuro.report_cli`` works too. ``mathneuro.cli`` and
``mathneuro.results`` are packages now (the command line, the results layer); they hand out the names of
the modules they were (``from mathneuro.cli import main``, ``from mathneuro.results import PointResult``).
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import warnings

#: old module -> where it lives now (removed in the release after 0.2)
MOVED = {
    "mathneuro.evaluation.prefix_cache": "mathneuro.evaluation.decoding.prefix_cache",  # 0.2: the decoding engine
    "mathneuro.evaluation.drafted": "mathneuro.evaluation.decoding.drafted",  # 0.2: the decoding engine
    "mathneuro.evaluation.drafts": "mathneuro.evaluation.decoding.drafts",  # 0.2: the decoding engine
    "mathneuro.evaluation.draft_lookup": "mathneuro.evaluation.decoding.draft_lookup",  # 0.2: the decoding engine
    "mathneuro.evaluation.gqa_attention": "mathneuro.evaluation.decoding.gqa_attention",  # 0.2: the decoding engine
    "mathneuro.evaluation.shared_context": "mathneuro.evaluation.decoding.shared_context",  # 0.2: the decoding engine
    "mathneuro.analysis": "mathneuro.report.overlap",
    "mathneuro.builtin_methods": "mathneuro.methods",  # the package re-exports every built-in
    "mathneuro.cache": "mathneuro.statistics.cache",
    "mathneuro.callbacks": "mathneuro.cli.callbacks",
    "mathneuro.config": "mathneuro.pipeline.config",
    "mathneuro.efficiency": "mathneuro.report.efficiency",
    "mathneuro.embedded": "mathneuro.models.embedded",
    "mathneuro.errors": "mathneuro.pipeline.errors",
    "mathneuro.export": "mathneuro.edit.export",
    "mathneuro.intervention": "mathneuro.edit.intervention",
    "mathneuro.locking": "mathneuro.util.locking",
    "mathneuro.method_registry": "mathneuro.methods.registry",
    "mathneuro.padding": "mathneuro.util.padding",
    "mathneuro.paired": "mathneuro.report.paired",
    "mathneuro.peak_memory": "mathneuro.util.peak_memory",
    "mathneuro.preflight": "mathneuro.pipeline.preflight",
    "mathneuro.recording": "mathneuro.results.recording",
    "mathneuro.registry": "mathneuro.util.registry",
    "mathneuro.report_cli": "mathneuro.cli.report",
    "mathneuro.runner": "mathneuro.pipeline.runner",
    "mathneuro.selection": "mathneuro.methods.selection",
    "mathneuro.targets": "mathneuro.models.targets",
    "mathneuro.tiny": "mathneuro.models.tiny",
    "mathneuro.workbench": "mathneuro.pipeline.workbench",
    # 0.2's own moves: the results layer and the command line (issue 39)
    "mathneuro.pipeline.callbacks": "mathneuro.cli.callbacks",
    "mathneuro.pipeline.cli": "mathneuro.cli.run",
    "mathneuro.pipeline.provenance": "mathneuro.results.provenance",
    "mathneuro.pipeline.recording": "mathneuro.results.recording",
    "mathneuro.pipeline.results": "mathneuro.results.schema",
    "mathneuro.pipeline.sweep_status": "mathneuro.cli.sweep_status",
    "mathneuro.pipeline.wandb_layout": "mathneuro.results.wandb_layout",
    "mathneuro.pipeline.wandb_point": "mathneuro.results.wandb_point",
    "mathneuro.report.cli": "mathneuro.cli.report",
}


class _AliasLoader(importlib.abc.Loader):
    def __init__(self, old: str, new: str) -> None:
        self.old, self.new = old, new

    def create_module(self, spec):
        warnings.warn(f"{self.old} moved to {self.new}; the old name goes in the next release",
                      DeprecationWarning, stacklevel=3)
        return importlib.import_module(self.new)

    def exec_module(self, module) -> None:  # the target module is already executed
        return None

    def get_code(self, fullname: str):  # python -m <old name>
        spec = importlib.util.find_spec(self.new)
        return spec.loader.get_code(self.new) if spec and spec.loader else None


class _AliasFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path=None, target=None):
        new = MOVED.get(fullname)
        if new is None:
            return None
        return importlib.machinery.ModuleSpec(fullname, _AliasLoader(fullname, new))


def install() -> None:
    """Put the alias finder on ``sys.meta_path`` (once)."""
    if not any(isinstance(f, _AliasFinder) for f in sys.meta_path):
        sys.meta_path.append(_AliasFinder())
