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

import dataclasses
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from mathneuro.methods.spec import LinearMethodConfig, MethodConfig, MethodInputs, MethodSpec
from mathneuro.util.registry import Registry, looks_like_import_path

__all__ = [
    "ATTRIBUTE", "BUILTIN_METHODS", "METHODS", "METHOD_NAMES", "LinearMethodConfig", "MethodConfig", "MethodInputs",
    "MethodSpec", "default_method_node", "inapplicable_settings", "method_facts", "method_name", "register_method", "resolve_method", "same_method", "spec_of",
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

    ``needs``: the statistics kinds (``linear_inputs``, ``activation_counts``) the runner computes for it;
    ``config``: its config dataclass (subclass :class:`MethodConfig` / :class:`LinearMethodConfig`);
    ``facts``: the other fields of :class:`~mathneuro.methods.spec.MethodSpec` (``unit``, ``uses_filters``,
    ``topk_per_matrix`` / ``min_top_k``, ``point_fields``, ``legacy_defaults``, ``stale``, ``reference``,
    ``sized_by``, ``default_sized_by``, ``extra_selections``, ``summary``, ``empty_hint``).
    """
    if target is not None:
        METHODS.register(name, target, replace=replace)
        return None
    known = {f.name for f in dataclasses.fields(MethodSpec)} - {"name", "fn", "needs", "config"}
    unknown = sorted(set(facts) - known)
    if unknown:
        raise TypeError(f"register_method({name!r}): unknown fact {unknown[0]!r}; known: {', '.join(sorted(known))}")
    return METHODS.decorator(name, lambda fn: MethodSpec(name, fn, tuple(needs), config, **facts), replace=replace)


# ------------------------------------------------------------------------------------ config nodes

def _builtin_fields() -> dict[str, Any]:
    """Every setting of a built-in method with its default: the keys a ``method`` node always accepts."""
    out: dict[str, Any] = {}
    for name in BUILTIN_METHODS:
        for f in dataclasses.fields(METHODS.get(name).config):
            if f.default is not dataclasses.MISSING:
                out.setdefault(f.name, f.default)
            elif f.default_factory is not dataclasses.MISSING:
                out.setdefault(f.name, f.default_factory())
    return out


def default_method_node() -> dict[str, Any]:
    """The schema default of ``method``: name mathneuro and every built-in setting, so that any of
    them may be overridden whichever method runs (settings of other methods are ignored)."""
    return {**_builtin_fields(), "name": "mathneuro"}


def node_dict(node: Any) -> dict[str, Any]:
    """A config node (DictConfig, dataclass, mapping, a bare name) as a plain dict; the intervention registry uses it too."""
    from omegaconf import DictConfig, OmegaConf

    if isinstance(node, DictConfig):
        return dict(OmegaConf.to_container(node, resolve=True))
    if dataclasses.is_dataclass(node) and not isinstance(node, type):
        return dataclasses.asdict(node)
    if isinstance(node, Mapping):
        return dict(node)
    if isinstance(node, str):
        return {"name": node}
    return dict(vars(node))


def resolve_method(node: Any, key: str = "method") -> tuple[MethodSpec, Any]:
    """The method a config node names and its validated config instance.

    ``node``: a mapping, OmegaConf node, dataclass (e.g. an already resolved config) or a name.
    ``_target_`` wins over ``name``. Keys that are settings of built-in methods but not of this one
    are ignored; any other unknown key, a wrong type or a bad value raises ValueError naming the key.
    """
    return resolve_plugin(METHODS, node, key, _builtin_fields())


def resolve_plugin(registry: Any, node: Any, key: str, builtin: dict[str, Any],
                   own_defaults_win: bool = False) -> tuple[Any, Any]:
    """The spec of ``registry`` (methods, interventions) a config node names and its validated config instance.

    ``_target_`` wins over ``name``. Keys that are settings of other built-ins (``builtin``: the schema's
    fields and defaults) but not of this one are ignored; any other unknown key, a wrong type or a bad
    value raises ValueError naming the key. ``own_defaults_win``: a setting left at the schema's None
    (another built-in's "unset") keeps this one's own default.
    """
    data = node_dict(node)
    target = data.pop("_target_", None)
    name = str(target or data.get("name") or "")
    if not name:
        raise ValueError(f"{key}.name: empty; allowed: {', '.join(registry.names())}")
    spec = registry.get(name)
    if target:
        data["name"] = spec.name
    names = {f.name for f in dataclasses.fields(spec.config)}
    ignorable = set(builtin) | {"name"}
    unknown = [k for k in data if k not in names and k not in ignorable]
    if unknown:
        allowed = ", ".join(sorted(names - {"name"})) or "none"
        raise ValueError(f"{key}.{unknown[0]}: not a setting of {registry.kind} {spec.name!r}; its settings: {allowed}")
    own = {f.name: f.default for f in dataclasses.fields(spec.config)}
    values = {k: v for k, v in data.items() if k in names and not (
        own_defaults_win and v is None and k in builtin and builtin[k] is None
        and own.get(k) not in (None, dataclasses.MISSING))}
    cfg = structured_config(spec.config, values, key)
    validate = getattr(cfg, "validate", None)
    if callable(validate):
        validate(key)
    return spec, cfg


def structured_config(cls: type, values: dict[str, Any], key: str) -> Any:
    """``cls(**values)`` type-checked by OmegaConf; a bad value is a ValueError naming the key."""
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    try:
        return OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(cls), values))
    except OmegaConfBaseException as exc:
        where = getattr(exc, "full_key", None) or ""
        msg = str(exc).splitlines()[0]
        raise ValueError(f"{key}.{where}: {msg}" if where else f"{key}: {msg}") from None


def inapplicable_settings(node: Any, spec: MethodSpec, given: Sequence[str] = ()) -> list[str]:
    """Settings in a ``method`` node that ``spec`` does not have and that someone set: named in ``given``
    (overrides, ``method.<setting>`` or ``<setting>``) or holding another value than their schema default."""
    data = node_dict(node)
    own = set(spec.settings()) | {"name", "_target_"}
    defaults = _builtin_fields()
    named = {g.lstrip("+~").split("=", 1)[0].removeprefix("method.") for g in given}
    return sorted(k for k, v in data.items()
                  if k not in own and (k in named or (k in defaults and _plain_value(v) != _plain_value(defaults[k]))))


def _plain_value(value: Any) -> Any:
    return json.loads(json.dumps(value, sort_keys=True, default=str))


def method_facts(name: str) -> dict[str, Any]:
    """The facts a report needs about the method called ``name`` (see :meth:`MethodSpec.facts`); a name that
    does not resolve here (a user's package absent) gets a weight-level method's facts."""
    try:
        return METHODS.get(name).facts()
    except Exception:  # noqa: BLE001 - a user's module may fail in any way on import; a report must not
        return MethodSpec(str(name), lambda inputs, cfg: None).facts()


def method_name(node: Any) -> str:
    """The name a method config node gives (its ``_target_`` if set), without importing anything."""
    data = node_dict(node)
    return str(data.get("_target_") or data.get("name") or "")


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
