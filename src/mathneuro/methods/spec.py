"""What a method is: its config dataclass (:class:`MethodConfig`), what it selects from
(:class:`MethodInputs`) and its registered description with every fact the pipeline needs about it
(:class:`MethodSpec`).

The runner, preflight checks, reports and results never test a method by name: what differs
between methods is written here, on the spec, where the method registers (see
``docs/extending.md``). A user's method declares the same facts as a built-in one.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from mathneuro.methods.selection import Selection
from mathneuro.models.targets import DEFAULT_PATTERN
from mathneuro.statistics.kinds import kind_names
from mathneuro.statistics.passes import Statistics
from mathneuro.util.plugins import PluginSpec, plain

#: What a selection is made of: masks over weight matrices, or MLP neuron indices.
UNITS = ("weights", "neurons")
#: The random reference of each unit: a method of this unit is compared with this method sized by it.
RANDOM_OF_UNIT = {"weights": "random", "neurons": "random_neurons"}
_AUTO = "auto"


@dataclass
class MethodConfig:
    """Settings every method has: its name (as given in the config)."""

    name: str = "mathneuro"

    def validate(self, key: str = "method") -> None:
        """Raise ValueError naming ``<key>.<field>`` for a bad value (subclasses add their checks)."""

    def uses_filters(self) -> bool:
        """False where these settings make the method score the task set alone, so that the runner
        spends no forward pass on the filter sets (``random`` sized by Wanda); the spec's
        ``uses_filters=False`` already says so for every setting."""
        return True


@dataclass
class LinearMethodConfig(MethodConfig):
    """Settings of methods that score decoder-block linears (statistics kind ``linear_inputs``)."""

    targets: str = DEFAULT_PATTERN  # regex over module names of the scored linears
    include_lm_head: bool = False


@dataclass
class MethodInputs:
    """What a method selects from: statistics of the task and of each filter, by kind, and the weights.

    ``task[kind]`` / ``filters[i][kind]`` hold every kind the method declared in ``needs``;
    ``weights`` maps parameter names of the scored linears to their tensors (empty when the
    method needs no ``linear_inputs``).
    """

    task: dict[str, Statistics]
    filters: list[dict[str, Statistics]]
    weights: Mapping[str, torch.Tensor]
    top_k: float
    seed: int
    model: torch.nn.Module | None = None
    # sizes of selections already made on these very inputs (statistics and weights), kept by the caller
    # (the workbench) so that a random reference need not select its sizing method's set again
    sizes: dict | None = None

    def filter_stats(self, kind: str) -> list[Statistics]:
        """Every filter dataset's statistics of ``kind``."""
        return [f[kind] for f in self.filters]


@dataclass(frozen=True)
class ExtraSelection:
    """A second set a method saves beside its selection (``selection_<suffix>.safetensors``): the selection
    of ``method`` run with the settings the two share (MathNeuro's math top-K set is Wanda's selection)."""

    method: str
    description: str = ""


def per_matrix_min_top_k(shapes: Mapping[str, tuple[int, ...]]) -> float:
    """The smallest K with floor(K · numel) >= 1 in the largest matrix: a per-matrix top-K below it selects nothing."""
    return 1.0 / max(math.prod(int(d) for d in shape) for shape in shapes.values())


def per_row_min_top_k(shapes: Mapping[str, tuple[int, ...]]) -> float:
    """The smallest K with floor(K · in_features) >= 1 in the widest matrix: a per-row top-K below it selects
    nothing."""
    return 1.0 / max(int(shape[-1]) for shape in shapes.values())


@dataclass(frozen=True)
class MethodSpec(PluginSpec):
    """A registered method and its facts.

    - ``needs``: statistics kinds, registered names or import paths
      (:data:`mathneuro.statistics.kinds.STATISTICS_KINDS`),
      kept under their registered names (the keys of ``inputs.task``);
    - ``config``: its settings dataclass (subclass of :class:`MethodConfig`);
    - ``unit``: ``"weights"`` (masks over weight matrices) or ``"neurons"`` (MLP neuron indices);
    - ``uses_filters``: False when it scores the task set alone (no forward pass over the filter sets);
    - ``min_top_k``: ``f(target shapes) -> K``, the smallest top-K that can select anything, checked before
      any statistics (``topk_per_matrix=True`` is :func:`per_matrix_min_top_k`); None: found by bisection
      only when a selection comes out empty;
    - ``point_fields``: settings recorded in ``results.json``'s ``point`` (reports group by them);
    - ``stale``: ``f(recorded settings, cfg) -> reason or None``, replacing the rule that resume compares every
      setting of the method with the recorded one (a missing one counts as its default);
    - ``reference``: the method that is its size-matched random reference (default: ``random`` for weights,
      ``random_neurons`` for neurons; None: none);
    - ``sized_by``: for a random reference method, the setting naming the method it is sized by (``reference``),
      ``default_sized_by`` its default, ``compared_with_every_method`` when its default sizing serves every
      method of the same unit (MathNeuro-sized ``random`` is the paper's random baseline);
    - ``extra_selections``: further sets saved with ``save_selection`` (:class:`ExtraSelection` by suffix);
    - ``summary``: ``f(selection) -> dict`` of extra fields for ``results.json``'s ``selection`` block;
    - ``empty_hint``: what to try when its selection comes out empty.
    """

    name: str
    fn: Callable[[MethodInputs, Any], Selection]
    needs: tuple[str, ...] = ("linear_inputs",)
    config: type = LinearMethodConfig
    topk_per_matrix: bool = False
    uses_filters: bool = True
    unit: str = "weights"
    min_top_k: Callable[[Mapping[str, tuple[int, ...]]], float] | None = None
    point_fields: tuple[str, ...] = ()
    stale: Callable[[Mapping[str, Any], Any], str | None] | None = None
    reference: str | None = _AUTO
    sized_by: str | None = None
    default_sized_by: str | None = None
    compared_with_every_method: bool = False
    extra_selections: Mapping[str, ExtraSelection] = field(default_factory=dict)
    summary: Callable[[Selection], dict] | None = None
    empty_hint: str = ""

    kind = "method"

    def __post_init__(self) -> None:
        try:
            needs = kind_names(self.needs)
        except ValueError as exc:
            raise ValueError(f"method {self.name!r}: {exc}") from None
        if not needs:
            raise ValueError(f"method {self.name!r}: needs at least one statistics kind, got {self.needs!r}")
        object.__setattr__(self, "needs", needs)
        self.check_config(MethodConfig)
        if self.unit not in UNITS:
            raise ValueError(f"method {self.name!r}: unit must be one of {', '.join(UNITS)}, got {self.unit!r}")
        self.check_settings((*self.point_fields, *([self.sized_by] if self.sized_by else [])))
        if self.reference == _AUTO:
            object.__setattr__(self, "reference", None if self.sized_by else RANDOM_OF_UNIT[self.unit])
        if self.min_top_k is None and self.topk_per_matrix:
            object.__setattr__(self, "min_top_k", per_matrix_min_top_k)

    def __call__(self, inputs: MethodInputs, cfg: Any) -> Selection:
        return self.fn(inputs, cfg)

    @property
    def is_reference(self) -> bool:
        """Whether this is a random reference, sized by another method."""
        return self.sized_by is not None

    def sizing(self, cfg: Any) -> str | None:
        """The method a reference config is sized by: its ``sized_by`` setting, else ``default_sized_by``
        (None for a method that is no reference)."""
        if not self.sized_by:
            return None
        value = cfg.get(self.sized_by) if isinstance(cfg, Mapping) else getattr(cfg, self.sized_by, None)
        return str(value or self.default_sized_by or "")

    def point(self, cfg: Any) -> dict[str, Any]:
        """The fields this method adds to ``results.json``'s ``point``: its ``point_fields``, and for a reference
        sized by another method than its default, ``reference``."""
        out = self.plain_settings(cfg, self.point_fields)
        sized = self.sizing(cfg)
        if sized and sized != self.default_sized_by:
            out["reference"] = sized
        return out

    def stale_reason(self, recorded: Mapping[str, Any], cfg: Any) -> str | None:
        """Why results recorded with the method settings ``recorded`` do not answer ``cfg`` (None: they do)."""
        if self.stale is not None:
            return self.stale(recorded, cfg)
        if self.sized_by:  # an unset sizing setting means the default sizing method
            old = self.sizing({self.sized_by: recorded.get(self.sized_by, self.default(self.sized_by))})
            if plain(old) != plain(self.sizing(cfg)):
                return f"made with method.{self.sized_by}={plain(old)}, this run asks for {plain(self.sizing(cfg))}"
        return self.stale_setting(recorded, cfg, skip=(self.sized_by,))

    def facts(self) -> dict[str, Any]:
        """The facts a report needs, as plain data (recorded in ``results.json`` as ``method_facts``)."""
        return {"unit": self.unit, "reference": self.reference, "sized_by": self.sized_by,
                "default_sized_by": self.default_sized_by,
                "compared_with_every_method": self.compared_with_every_method,
                "extra_selections": {k: v.method for k, v in self.extra_selections.items()}}

