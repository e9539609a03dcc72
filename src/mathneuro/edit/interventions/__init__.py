"""Interventions: what is done to a selection, one file per built-in, each registered with its facts.

:mod:`~mathneuro.edit.interventions.spec` says what an intervention is (its config, the context it is
given, its facts); :mod:`~mathneuro.edit.interventions.registry` finds one by name or import path.
Built-ins: :mod:`~mathneuro.edit.interventions.prune`, :mod:`~mathneuro.edit.interventions.scale`,
:mod:`~mathneuro.edit.interventions.noise`, :mod:`~mathneuro.edit.interventions.mean_ablate` and
:mod:`~mathneuro.edit.interventions.finetune` (over :mod:`~mathneuro.edit.interventions.sparse`).
Every one returns an :class:`~mathneuro.edit.undoable.Intervention` whose undo is bit-exact.
"""

from mathneuro.edit.interventions.registry import (
    BUILTIN_INTERVENTIONS,
    INTERVENTIONS,
    default_intervention_node,
    register_intervention,
    resolve_intervention,
)
from mathneuro.edit.interventions.spec import InterventionConfig, InterventionContext, InterventionSpec
from mathneuro.edit.undoable import Intervention

__all__ = ["BUILTIN_INTERVENTIONS", "INTERVENTIONS", "Intervention", "InterventionConfig", "InterventionContext",
           "InterventionSpec", "default_intervention_node", "register_intervention", "resolve_intervention"]
