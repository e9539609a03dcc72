"""The built-in methods as registry entries: each one's config dataclass and its adapter from
:class:`~mathneuro.methods.registry.MethodInputs` to the selection functions of :mod:`mathneuro.methods.functions`."""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass, field
from typing import Any, Optional

from mathneuro.methods.functions import (
    check_fraction,
    check_lape_share,
    lape_saturation_message,
    lape_selection,
    mathneuro_selection,
    random_neuron_selection,
    random_selection,
    wanda_selection,
)
from mathneuro.methods.registry import (
    METHODS,
    LinearMethodConfig,
    MethodConfig,
    MethodInputs,
    MethodSpec,
    register_method,
    resolve_method,
)
from mathneuro.methods.selection import Selection
from mathneuro.pipeline.results import DEFAULT_REFERENCE

log = logging.getLogger("mathneuro")


@dataclass
class MathNeuroConfig(LinearMethodConfig):
    name: str = "mathneuro"
    filter_top_k: Optional[float] = None  # K of the filter side (default: top_k)

    def validate(self, key: str = "method") -> None:
        if self.filter_top_k is not None:
            check_fraction(self.filter_top_k, f"{key}.filter_top_k")


@dataclass
class WandaConfig(LinearMethodConfig):
    name: str = "wanda"


@dataclass
class RandomConfig(MathNeuroConfig):
    name: str = "random"
    # whose per-matrix counts to match: any weight-level method scoring linears (mathneuro, wanda, wanda_row,
    # a registered one or "pkg.mod:fn"); the settings shared with it (filter_top_k, targets) apply to it
    reference: str = DEFAULT_REFERENCE
    reference_args: dict[str, Any] = field(default_factory=dict)  # the reference's own other settings

    def validate(self, key: str = "method") -> None:
        super().validate(key)
        reference_config(self, key)

    def uses_filters(self) -> bool:
        return reference_spec(self.reference).uses_filters


@dataclass
class LapeConfig(MethodConfig):
    name: str = "lape"
    filter_rate: float = 0.95
    activation_bar: float = 0.95
    share: str = "all"  # top_k is a share of all MLP neurons (the original) or of the candidates

    def validate(self, key: str = "method") -> None:
        check_lape_share(self.share, f"{key}.share")
        for name in ("filter_rate", "activation_bar"):
            value = getattr(self, name)
            if not 0 < value < 1:
                raise ValueError(f"{key}.{name}: must be in (0, 1), got {value!r}")


@dataclass
class RandomNeuronsConfig(LapeConfig):
    name: str = "random_neurons"


@register_method("mathneuro", needs=("linear_inputs",), config=MathNeuroConfig, topk_per_matrix=True)
def mathneuro_method(inputs: MethodInputs, cfg: MathNeuroConfig) -> Selection:
    """Top-K of the task score minus the union of the filters' top-K, per matrix."""
    return mathneuro_selection(inputs.weights, inputs.task["linear_inputs"], inputs.filter_stats("linear_inputs"),
                               inputs.top_k, filter_top_k=cfg.filter_top_k)


@register_method("wanda", needs=("linear_inputs",), config=WandaConfig, topk_per_matrix=True,
                 uses_filters=False)
def wanda_method(inputs: MethodInputs, cfg: WandaConfig) -> Selection:
    """The paper's Wanda ablation: top-K of the task score alone, per matrix."""
    return wanda_selection(inputs.weights, inputs.task["linear_inputs"], inputs.top_k)


@register_method("wanda_row", needs=("linear_inputs",), config=WandaConfig, topk_per_matrix=True,
                 uses_filters=False)
def wanda_row_method(inputs: MethodInputs, cfg: WandaConfig) -> Selection:
    """Wanda proper: |W|·sqrt(Σx²), top-K within each output row."""
    return wanda_selection(inputs.weights, inputs.task["linear_inputs"], inputs.top_k, per_row=True)


def _cannot_size_random(spec: MethodSpec) -> str | None:
    """Why ``spec`` cannot be ``random``'s reference (None: it can, as it scores linears alone)."""
    if spec.name == "random":
        return "random cannot size itself"
    if tuple(spec.needs) != ("linear_inputs",):
        return (f"it needs {', '.join(spec.needs)} statistics, not only linear_inputs; a neuron-level method has "
                "its own random reference, e.g. random_neurons for lape")
    return None


def weight_level_references() -> list[str]:
    """Registered methods ``random`` can be sized by: those scoring linears alone (not ``random`` itself)."""
    names = []
    for name in METHODS.names():
        try:
            spec = METHODS.get(name)
        except Exception:  # noqa: BLE001 - a user's lazy entry that fails to import is simply not offered
            continue
        if _cannot_size_random(spec) is None:
            names.append(name)
    return names


def reference_spec(name: str, key: str = "method.reference") -> MethodSpec:
    """The method whose per-matrix counts ``random`` matches; ValueError naming ``key`` if it cannot be one."""
    try:
        spec = METHODS.get(name)
        why = _cannot_size_random(spec)
    except ValueError as exc:
        why = str(exc).split(": ", 1)[-1].split(";")[0]  # "unknown method 'x'" or why its import failed
    if why is None:
        return spec
    raise ValueError(f"{key}: {name!r} cannot size random ({why}); allowed: "
                     f"{', '.join(weight_level_references())}, or an import path 'package.module:function'")


def reference_config(cfg: RandomConfig, key: str = "method") -> tuple[MethodSpec, Any]:
    """The reference method of ``cfg`` and its validated config: the settings ``cfg`` shares with it,
    then ``cfg.reference_args``; a bad one is a ValueError naming ``<key>.reference_args.<setting>``."""
    spec = reference_spec(cfg.reference, f"{key}.reference")
    fields = {f.name for f in dataclasses.fields(spec.config)} - {"name"}
    shared = {name: getattr(cfg, name) for name in fields if hasattr(cfg, name)}
    return resolve_method({**shared, **dict(cfg.reference_args), "name": cfg.reference}, f"{key}.reference_args")


def reference_selection(inputs: MethodInputs, cfg: RandomConfig) -> Selection:
    """The selection of ``cfg.reference`` (see :func:`reference_config`)."""
    spec, ref_cfg = reference_config(cfg)
    ref_inputs = inputs if spec.uses_filters else dataclasses.replace(inputs, filters=[])
    selection = spec(ref_inputs, ref_cfg)
    if selection.neurons:
        raise ValueError(f"method.reference={cfg.reference!r} selected neurons, not weights; random matches "
                         "per-matrix weight counts only")
    return selection


@register_method("random", needs=("linear_inputs",), config=RandomConfig, topk_per_matrix=True)
def random_method(inputs: MethodInputs, cfg: RandomConfig) -> Selection:
    """In every matrix as many weights as the reference method (``method.reference``) selects there,
    drawn with ``seed``: the reference's per-matrix size without its choice of weights."""
    reference = reference_selection(inputs, cfg)
    shapes = {n: w.shape for n, w in inputs.weights.items()}
    sel = random_selection(shapes, reference.counts(), inputs.seed)
    sel.meta.update(top_k=inputs.top_k, reference=cfg.reference)
    return sel


@register_method("lape", needs=("lape",), config=LapeConfig)
def lape_method(inputs: MethodInputs, cfg: LapeConfig) -> Selection:
    """Math-specific MLP neurons by activation-probability entropy (LAPE)."""
    sel = lape_selection(inputs.task["lape"], inputs.filter_stats("lape"), inputs.top_k,
                         filter_rate=cfg.filter_rate, activation_bar=cfg.activation_bar, share=cfg.share)
    message = lape_saturation_message(sel.meta)
    if message:
        log.warning(message)
    return sel


@register_method("random_neurons", needs=("lape",), config=RandomNeuronsConfig)
def random_neurons_method(inputs: MethodInputs, cfg: RandomNeuronsConfig) -> Selection:
    """In every MLP layer as many neurons as LAPE (same settings) keeps there, drawn with ``seed``:
    LAPE's random reference at its own size (``random`` matches MathNeuro's weight counts instead)."""
    reference = lape_method(inputs, cfg)  # warns as lape does when the selection is saturated
    widths = {m: inputs.task["lape"].get(m, "positive").numel() for m in inputs.task["lape"].modules()}
    sel = random_neuron_selection(widths, reference.counts(), inputs.seed)
    sel.meta.update(reference="lape", lape=reference.meta)
    return sel
