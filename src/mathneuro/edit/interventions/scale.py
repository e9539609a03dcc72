"""``scale``: multiply the selected weights (or neurons' activations) by ``intervention.scalar``.

The paper's edit (1.1 for small models, 1.01 for 8B). Weight edits are in place with the touched
entries kept for the undo; neuron edits are forward hooks on the MLP activation modules, baked into
the output projection's columns while an edited model is exported.
"""

from __future__ import annotations

from dataclasses import dataclass

from mathneuro.edit.export import neuron_edits_as_weights
from mathneuro.edit.interventions.registry import register_intervention
from mathneuro.edit.interventions.spec import InterventionConfig, InterventionContext
from mathneuro.edit.undoable import Intervention, apply_intervention, check_scalar


@dataclass
class ScaleConfig(InterventionConfig):
    name: str = "scale"
    scalar: float = 1.1

    def validate(self, key: str = "intervention") -> None:
        check_scalar(self.scalar, f"{key}.scalar")


def scalar_edit(ctx: InterventionContext, scalar: float) -> Intervention:
    """Multiply the selection by ``scalar`` (undoable), with the bake of neuron edits for an export."""
    handle = apply_intervention(ctx.model, ctx.selection, scalar)
    if ctx.selection.neurons:
        model, selection = ctx.model, ctx.selection
        handle.bake = lambda: apply_intervention(model, neuron_edits_as_weights(model, selection), scalar)
    handle.record = {"scalar": float(scalar)}
    return handle


@register_intervention("scale", config=ScaleConfig, units=("weights", "neurons"), point_fields=("scalar",),
                       identity=lambda cfg: float(cfg.scalar),
                       description="multiply the selection by intervention.scalar")
def scale(ctx: InterventionContext, cfg: ScaleConfig) -> Intervention:
    """Multiply every selected weight (or neuron activation) by ``cfg.scalar``."""
    return scalar_edit(ctx, cfg.scalar)
