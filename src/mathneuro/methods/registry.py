"""Selection methods by name: what each needs (statistics kinds), its own config, and how to run it.

A method is a function ``fn(inputs: MethodInputs, cfg) -> Selection`` registered with
:func:`register_method`::

    @register_method("ratio", needs=("linear_inputs",), config=RatioConfig)
    def ratio(inputs: MethodInputs, cfg: RatioConfig) -> Selection: ...

The runner computes (or loads from the cache) the statistics kinds the method needs for the task
samples and every filter dataset, and passes them in :class:`MethodInputs`. The config node
``method`` (Hydra group ``method``) names the method by ``name`` (a registered name or an import
path ``my_pkg.my_mod:my_method``) or by ``_target_``; its other keys fill the method's config
dataclass, which is type-checked and validated before any model loads.

Built-in methods are lazy entries (``"mathneuro.methods.<file>:<name>_method"``): nothing is imported
until a method is looked up.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from mathneuro.methods.spec import LinearMethodConfig, MethodConfig, MethodInputs, MethodSpec
from mathneuro.util.plugins import builtin_fields, check_facts, resolve
from mathneuro.util.registry import Registry, looks_like_import_path

__all__ = [
    "ATTRIBUTE", "BUILTIN_METHODS", "METHODS", "METHOD_NAMES", "LinearMethodConfig", "MethodConfig", "MethodInputs",
    "MethodSpec", "default_method_node", "method_facts", "register_method", "resolve_method", "same_method", "spec_of",
]

ATTRIBUTE = "__mathneuro_method__"  # a decorated function carries its spec here

#: The built-in methods, one file each under mathneuro/methods/, imported on first lookup.
BUILTIN_METHODS = {
    "mathneuro": "mathneuro.methods.mathneuro:mathneuro_method",
    "wanda": "mathneuro.methods.wanda:wanda_method",
    "wanda_row": "mathneuro.methods.wanda:wanda_row_method",
    "random": "mathneuro.methods.random:random_method",
    "lape": "mathneuro.methods.lape:lape_method",
    "random_neurons": "mathneuro.methods.random_neurons:random_neurons_method",
}
#: The built-in methods' names.
METHOD_NAMES = tuple(BUILTIN_METHODS)

# A plain function named by import path scores linears and has the shared settings only.
METHODS: Registry[MethodSpec] = Registry("method", "method.name", MethodSpec, ATTRIBUTE,
                                         plain=lambda fn, name: MethodSpec(name, fn))
for _name, _target in BUILTIN_METHODS.items():
    METHODS.register(_name, _target)


def spec_of(fn: Callable) -> MethodSpec:
    """The spec a function decorated with :func:`register_method` carries."""
    return getattr(fn, ATTRIBUTE)


def register_method(name: str, target: str | None = None, *, needs: Sequence[str] = ("linear_inputs",),
                    config: type = LinearMethodConfig, replace: bool = False, **facts: Any):
    """Register a method under ``name``; a decorator, or with ``target="module:attr"`` a lazy entry.

    ``needs``: the statistics kinds the runner computes for it (registered names such as ``linear_inputs``,
    ``activation_counts``, or import paths of a user's kinds, see :mod:`mathneuro.statistics.kinds`);
    ``config``: its config dataclass (subclass :class:`MethodConfig` / :class:`LinearMethodConfig`);
    ``facts``: the other fields of :class:`~mathneuro.methods.spec.MethodSpec` (``unit``, ``uses_filters``,
    ``topk_per_matrix`` / ``min_top_k``, ``point_fields``, ``stale``, ``reference``,
    ``sized_by``, ``default_sized_by``, ``extra_selections``, ``summary``, ``empty_hint``).
    """
    if target is not None:
        METHODS.register(name, target, replace=replace)
        return None
    check_facts("register_method", name, MethodSpec, facts, ("fn", "needs", "config"))
    return METHODS.decorator(name, lambda fn: MethodSpec(name, fn, tuple(needs), config, **facts), replace=replace)


# ------------------------------------------------------------------------------------ config nodes

def _builtin_fields() -> dict[str, Any]:
    """Every setting of a built-in method with its default: the keys a ``method`` node always accepts."""
    return builtin_fields(METHODS, BUILTIN_METHODS)


def default_method_node() -> dict[str, Any]:
    """The schema default of ``method``: name mathneuro and every built-in setting, so that any of
    them may be overridden whichever method runs (settings of other methods are ignored)."""
    return {**_builtin_fields(), "name": "mathneuro"}


def resolve_method(node: Any, key: str = "method") -> tuple[MethodSpec, Any]:
    """The method a config node names and its validated config instance.

    ``node``: a mapping, OmegaConf node, dataclass (e.g. an already resolved config) or a name.
    ``_target_`` wins over ``name``. Keys that are settings of built-in methods but not of this one
    are ignored; any other unknown key, a wrong type or a bad value raises ValueError naming the key.
    """
    return resolve(METHODS, node, key, _builtin_fields())


def method_facts(name: str) -> dict[str, Any]:
    """The facts a report needs about the method called ``name`` (see :meth:`MethodSpec.facts`); a name that
    does not resolve here (a user's package absent) gets a weight-level method's facts."""
    try:
        return METHODS.get(name).facts()
    except Exception:  # noqa: BLE001 - a user's module may fail in any way on import; a report must not
        return MethodSpec(str(name), lambda inputs, cfg: None).facts()


def same_method(a: str, b: str) -> bool:
    """Whether two method names name one method: a user's method by its registered name and by its
    import path (``pkg.mod:fn``) is one. Names that do not resolve (a package absent where a report
    runs) are compared as written."""
    if a == b:
        return True
    if not (looks_like_import_path(a) or looks_like_import_path(b)):
        return False  # two registered names: one method only if written alike

    def canonical(name: str) -> str:
        try:
            return METHODS.get(name).name
        except Exception:  # a user's module may fail in any way on import; the report must not
            return name

    return canonical(a) == canonical(b)
