"""Statistics kinds by name: what each hooks and the accumulator that sums it over a forward pass.

A kind is an accumulator factory registered with :func:`register_statistics_kind`::

    @register_statistics_kind("channel_max", modules="linears", hook="input")
    class ChannelMax:
        def __init__(self, modules, kernel): ...
        def new_batch(self, mask, padded): ...      # mask [B, T] on the input device, 1 on real tokens
        def hook(self, name): ...                   # the hook put on module ``name``
        def state(self): ...                        # {group: {module: tensor}}: what a checkpoint saves
        def tensors(self): ...                      # {"<module>::<stat>": tensor}: what the cache stores

``modules``: what it hooks, the scored ``linears`` (a method's ``targets``) or the MLP activation
modules (``mlp_activations``); ``hook``: ``input`` (a forward pre-hook, ``hook(module, args)``) or
``output`` (a forward hook, ``hook(module, args, output)``). One pass over the decoder feeds every
kind asked for; the statistics cache (:mod:`mathneuro.statistics.cache`) stores each kind's
``tensors()`` under a key of the model, the texts, ``max_length``, the kind's name and its modules.
A method names the kinds it needs by registered name or import path (``my_pkg.my_mod:ChannelMax``);
built-in kinds are lazy entries, imported on first lookup.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from mathneuro.models.targets import find_mlp_activations, find_target_linears
from mathneuro.util.plugins import PluginSpec, check_facts
from mathneuro.util.registry import Registry

__all__ = ["BUILTIN_KINDS", "HOOKS", "any_hooks", "MODULES", "STATISTICS_KINDS", "StatisticsKindSpec", "hooked_modules",
           "kind_names", "kind_spec", "register_statistics_kind"]

ATTRIBUTE = "__mathneuro_statistics_kind__"  # a decorated factory carries its spec here
#: What a kind hooks: the scored linears, or the MLP activation modules.
MODULES = ("linears", "mlp_activations")
#: Where it hooks: a module's input (forward pre-hook) or its output (forward hook).
HOOKS = ("input", "output")


@dataclass(frozen=True)
class StatisticsKindSpec(PluginSpec):
    """A registered statistics kind: ``factory(modules, kernel)`` makes its accumulator for the hooked
    ``modules`` (name -> module); ``modules`` and ``hook`` say what it hooks (:data:`MODULES`, :data:`HOOKS`)."""

    name: str
    factory: Callable[[dict[str, Any], str], Any]
    modules: str = "linears"
    hook: str = "input"
    description: str = ""
    config: Any = None  # kinds have no settings of their own
    kind = "statistics kind"

    def __post_init__(self) -> None:
        if self.modules not in MODULES:
            raise ValueError(f"statistics kind {self.name!r}: modules must be one of {', '.join(MODULES)}, "
                             f"got {self.modules!r}")
        if self.hook not in HOOKS:
            raise ValueError(f"statistics kind {self.name!r}: hook must be one of {', '.join(HOOKS)}, "
                             f"got {self.hook!r}")

    def attach(self, accumulator: Any, modules: dict[str, Any]) -> list:
        """Put ``accumulator``'s hook on each of ``modules``; the hook handles."""
        if self.hook == "input":
            return [mod.register_forward_pre_hook(accumulator.hook(name)) for name, mod in modules.items()]
        return [mod.register_forward_hook(accumulator.hook(name)) for name, mod in modules.items()]


#: The built-in kinds (:mod:`mathneuro.statistics.accumulators`), imported on first lookup.
BUILTIN_KINDS = {
    "linear_inputs": "mathneuro.statistics.accumulators:LinearInputsAccumulator",
    "activation_counts": "mathneuro.statistics.accumulators:ActivationCountsAccumulator",
}

STATISTICS_KINDS: Registry[StatisticsKindSpec] = Registry("statistics kind", "needs", StatisticsKindSpec, ATTRIBUTE)
for _name, _target in BUILTIN_KINDS.items():
    STATISTICS_KINDS.register(_name, _target)


def register_statistics_kind(name: str, target: str | None = None, *, modules: str = "linears", hook: str = "input",
                             replace: bool = False, **facts: Any):
    """Register a statistics kind under ``name``; a decorator of its accumulator factory, or with
    ``target="module:attr"`` a lazy entry. ``facts``: the other fields of :class:`StatisticsKindSpec`."""
    if target is not None:
        STATISTICS_KINDS.register(name, target, replace=replace)
        return None
    check_facts("register_statistics_kind", name, StatisticsKindSpec, facts, ("factory", "modules", "hook", "config"))
    return STATISTICS_KINDS.decorator(
        name, lambda factory: StatisticsKindSpec(name, factory, modules, hook, **facts), replace=replace)


def kind_spec(name: str) -> StatisticsKindSpec:
    """The kind called ``name`` (a registered name or an import path); ValueError if there is none."""
    return STATISTICS_KINDS.get(name)


def kind_names(kinds: Sequence[str]) -> tuple[str, ...]:
    """The registered names of ``kinds`` (import paths resolved; a kind found by import path is registered
    under its name, so that a pass and the cache find it by that name)."""
    names = []
    for kind in kinds:
        spec = kind_spec(kind)
        if spec.name not in STATISTICS_KINDS or STATISTICS_KINDS.get(spec.name) is not spec:
            STATISTICS_KINDS.register(spec.name, spec)
        names.append(spec.name)
    return tuple(dict.fromkeys(names))


def any_hooks(kinds: Sequence[str], modules: str) -> bool:
    """Whether any of ``kinds`` hooks ``modules`` (``linears``: the method scores linears; ``mlp_activations``)."""
    return any(kind_spec(k).modules == modules for k in kinds)


def hooked_modules(model: Any, kinds: Sequence[str], targets: dict | None = None,
                   activations: dict | None = None) -> dict[str, dict[str, Any]]:
    """``{kind: {module name: module}}``: what each kind hooks in ``model`` (``targets``: the scored linears,
    default every decoder-block linear; ``activations``: the MLP activations, default all of them)."""
    specs = [kind_spec(k) for k in kinds]
    if targets is None and any(s.modules == "linears" for s in specs):
        targets = find_target_linears(model)
    if activations is None and any(s.modules == "mlp_activations" for s in specs):
        activations = find_mlp_activations(model)
    return {s.name: (targets if s.modules == "linears" else activations) for s in specs}
