"""Interventions by name: the units each can edit, what it needs, its own config, and how to run it.

An intervention is a function ``fn(ctx: InterventionContext, cfg) -> Intervention`` registered with
:func:`register_intervention`::

    @register_intervention("clamp", config=ClampConfig, units=("weights",))
    def clamp(ctx: InterventionContext, cfg: ClampConfig) -> Intervention: ...

It edits ``ctx.model`` in place, keeping what the returned :class:`~mathneuro.edit.undoable.Intervention`
needs to undo it bit for bit. The config node ``intervention`` (Hydra group ``intervention``) names
it by ``name`` (a registered name or an import path ``my_pkg.my_mod:my_fn``) or by ``_target_``; its
other keys fill the intervention's config dataclass, type-checked and validated before any model
loads. Built-in interventions are lazy entries: nothing is imported until one is looked up.
"""

from __future__ import annotations

from typing import Any

from mathneuro.edit.interventions.spec import InterventionConfig, InterventionContext, InterventionSpec
from mathneuro.util.plugins import builtin_fields, check_facts, resolve
from mathneuro.util.registry import Registry

ATTRIBUTE = "__mathneuro_intervention__"  # a decorated function carries its spec here

#: The built-in interventions, one file each under mathneuro/edit/interventions/, imported on first lookup.
BUILTIN_INTERVENTIONS = {
    "prune": "mathneuro.edit.interventions.prune:prune",
    "scale": "mathneuro.edit.interventions.scale:scale",
    "noise": "mathneuro.edit.interventions.noise:noise",
    "mean_ablate": "mathneuro.edit.interventions.mean_ablate:mean_ablate",
    "finetune": "mathneuro.edit.interventions.finetune:finetune",
}

INTERVENTIONS: Registry[InterventionSpec] = Registry("intervention", "intervention.name", InterventionSpec, ATTRIBUTE)
for _name, _target in BUILTIN_INTERVENTIONS.items():
    INTERVENTIONS.register(_name, _target)


def register_intervention(name: str, target: str | None = None, *, config: type = InterventionConfig,
                          replace: bool = False, **facts: Any):
    """Register an intervention under ``name``; a decorator, or with ``target="module:attr"`` a lazy entry.

    ``config``: its settings dataclass (subclass :class:`InterventionConfig`); ``facts``: the other fields
    of :class:`~mathneuro.edit.interventions.spec.InterventionSpec` (``units``, ``needs``, ``point_fields``,
    ``identity``, ``exportable``, ``description``).
    """
    if target is not None:
        INTERVENTIONS.register(name, target, replace=replace)
        return None
    check_facts("register_intervention", name, InterventionSpec, facts, ("fn", "config"))
    return INTERVENTIONS.decorator(name, lambda fn: InterventionSpec(name, fn, config, **facts), replace=replace)


def _builtin_fields() -> dict[str, Any]:
    """Every setting of a built-in intervention with its default: the keys an ``intervention`` node always accepts."""
    return builtin_fields(INTERVENTIONS, BUILTIN_INTERVENTIONS)


def default_intervention_node() -> dict[str, Any]:
    """The schema default of ``intervention``: prune, with every built-in setting, so that any of them may
    be overridden whichever intervention runs."""
    return {**_builtin_fields(), "name": "prune"}


def resolve_intervention(node: Any, key: str = "intervention") -> tuple[InterventionSpec, Any]:
    """The intervention a config node names and its validated config instance.

    Keys that are settings of built-in interventions but not of this one are ignored when they hold
    their default (see :func:`mathneuro.util.plugins.unused_settings` for the ones someone set); any other unknown key,
    a wrong type or a bad value raises ValueError naming the key.
    """
    # a setting left at the schema's None (another built-in's "unset") keeps this intervention's own default
    return resolve(INTERVENTIONS, node, key, _builtin_fields(), own_defaults_win=True)


__all__ = ["ATTRIBUTE", "BUILTIN_INTERVENTIONS", "INTERVENTIONS", "InterventionConfig", "InterventionContext",
           "InterventionSpec", "default_intervention_node", "register_intervention",
           "resolve_intervention"]
