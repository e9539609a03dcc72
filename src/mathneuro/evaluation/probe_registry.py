"""Probes by name: fast evaluations that run on the in-memory model without lm-evaluation-harness.

A probe is a function ``fn(ctx: ProbeContext) -> {metric: value}`` registered with
:func:`register_probe`::

    @register_probe("my_probe", kind="math")
    def my_probe(ctx: ProbeContext) -> dict[str, float]: ...

and named in ``eval.tasks`` by its registered name or by an import path
(``eval.tasks=[my_pkg.my_mod:my_probe]``, the colon form); its metrics are reported as
``<kind>/<task>/<metric>`` like every other task. Built-in probes are lazy entries
(``"mathneuro.evaluation.builtin_probes:..."``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from mathneuro.util.registry import Registry

ATTRIBUTE = "__mathneuro_probe__"
KINDS = ("math", "nonmath")


@dataclass
class ProbeContext:
    """What a probe runs on: the model as it is now, the evaluation config and per-probe state.

    ``cache`` lives as long as the evaluator (data loaded once, reused for the baseline and every
    edited model); a probe sets ``num_examples`` to report how many examples it scored, and may set
    ``records``: one ``{"doc_id": int, "<metric>": number, ...}`` per example, the mean of a column
    being the metric it returns. With ``eval.log_samples`` they are written like a harness task's
    per-example records, so the report pairs the probe across sweep points (``paired.csv``). ``info``:
    what ``results.json``'s ``provenance.tasks`` records of the probe (e.g. ``{"n_shot": 5}``).
    """

    model: torch.nn.Module
    tokenizer: Any
    cfg: Any  # EvalConfig
    task: str
    limit: float | int | None = None
    data_dir: Path | None = None
    cache: dict[str, Any] = field(default_factory=dict)
    num_examples: int | None = None
    records: list[dict[str, Any]] | None = None
    info: dict[str, Any] | None = None  # what produced the scores (``n_shot``, ``lm_eval_version``...), for provenance

    @property
    def batch_size(self) -> int:
        return int(self.cfg.batch_size)

    @property
    def progress(self) -> bool:
        return bool(self.cfg.progress)


@dataclass(frozen=True)
class ProbeSpec:
    """A registered probe: its name, the side it scores by default, its function."""

    name: str
    fn: Callable[[ProbeContext], dict[str, float]]
    kind: str = "math"

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"probe {self.name!r}: kind must be one of {', '.join(KINDS)}, got {self.kind!r}")

    def __call__(self, ctx: ProbeContext) -> dict[str, float]:
        return self.fn(ctx)


PROBES: Registry[ProbeSpec] = Registry("probe", "eval.tasks", ProbeSpec, ATTRIBUTE)
for _name in ("arith", "gsm8k_gen", "mc", "ppl"):
    PROBES.register(_name, f"mathneuro.evaluation.builtin_probes:{_name}")


def register_probe(name: str, target: str | None = None, *, kind: str = "math", replace: bool = False):
    """Register a probe under ``name``: a decorator, or with ``target="module:attr"`` a lazy entry.

    ``kind``: the side (``math`` / ``nonmath``) its metrics count for, unless ``eval.math_tasks`` /
    ``eval.nonmath_tasks`` say otherwise.
    """
    if target is not None:
        PROBES.register(name, target, replace=replace)
        return None

    return PROBES.decorator(name, lambda fn: ProbeSpec(name, fn, kind), replace=replace)


def is_probe(task: str) -> bool:
    """Whether ``task`` names a probe: a registered one, or an import path ``module:attr`` (lm-eval
    task names never hold a colon)."""
    return task in PROBES or ":" in task


def probe_spec(task: str) -> ProbeSpec:
    """The probe ``task`` names; ValueError naming ``eval.tasks`` if there is none."""
    return PROBES.get(task)
