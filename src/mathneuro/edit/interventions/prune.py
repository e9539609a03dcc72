"""``prune``: set the selected weights (or neurons' activations) to zero, i.e. ``scale`` with scalar 0."""

from __future__ import annotations

from dataclasses import dataclass

from mathneuro.edit.interventions.registry import register_intervention
from mathneuro.edit.interventions.scale import scalar_edit
from mathneuro.edit.interventions.spec import InterventionConfig, InterventionContext
from mathneuro.edit.undoable import Intervention, check_scalar


@dataclass
class PruneConfig(InterventionConfig):
    name: str = "prune"
    scalar: float = 0.0  # always 0: the point's scalar in results.json and the reports

    def validate(self, key: str = "intervention") -> None:
        if check_scalar(self.scalar, f"{key}.scalar") != 0:
            raise ValueError(f"{key}.scalar: prune means scalar 0, got {self.scalar}; use intervention=scale")


@register_intervention("prune", config=PruneConfig, units=("weights", "neurons"), point_fields=("scalar",),
                       identity=lambda cfg: float(cfg.scalar), description="set the selection to zero")
def prune(ctx: InterventionContext, cfg: PruneConfig) -> Intervention:
    """Zero every selected weight (or neuron activation)."""
    return scalar_edit(ctx, 0.0)
