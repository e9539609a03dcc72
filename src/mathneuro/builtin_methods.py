"""The built-in methods as registry entries: each one's config dataclass and its adapter from
:class:`~mathneuro.method_registry.MethodInputs` to the selection functions of :mod:`mathneuro.methods`."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Optional

from mathneuro.method_registry import LinearMethodConfig, MethodConfig, MethodInputs, register_method
from mathneuro.methods import (
    check_fraction,
    check_lape_share,
    lape_saturation_message,
    lape_selection,
    mathneuro_selection,
    random_neuron_selection,
    random_selection,
    wanda_selection,
)
from mathneuro.selection import Selection

log = logging.getLogger("mathneuro")

REFERENCES = ("mathneuro",)


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
    reference: str = "mathneuro"  # whose per-matrix counts to match (its filter_top_k applies)

    def validate(self, key: str = "method") -> None:
        super().validate(key)
        if self.reference not in REFERENCES:
            raise ValueError(f"{key}.reference: unknown value {self.reference!r}; allowed: {', '.join(REFERENCES)}")


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


@register_method("random", needs=("linear_inputs",), config=RandomConfig, topk_per_matrix=True)
def random_method(inputs: MethodInputs, cfg: RandomConfig) -> Selection:
    """In every matrix as many weights as the reference method selects there, drawn with ``seed``."""
    reference = mathneuro_method(inputs, cfg)
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
