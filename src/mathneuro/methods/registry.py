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

Built-in methods are lazy entries (``"mathneuro.methods.builtin:..."``): nothing is imported
until a method is looked up.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from mathneuro.methods.functions import METHODS as BUILTIN_METHODS
from mathneuro.methods.selection import Selection
from mathneuro.models.targets import DEFAULT_PATTERN
from mathneuro.statistics.passes import KINDS, Statistics
from mathneuro.util.registry import Registry, looks_like_import_path

ATTRIBUTE = "__mathneuro_method__"  # a decorated function carries its spec here


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

    def filter_stats(self, kind: str) -> list[Statistics]:
        """Every filter dataset's statistics of ``kind``."""
        return [f[kind] for f in self.filters]


@dataclass(frozen=True)
class MethodSpec:
    """A registered method: its name, the statistics kinds it needs, its config class, its function."""

    name: str
    fn: Callable[[MethodInputs, Any], Selection]
    needs: tuple[str, ...] = ("linear_inputs",)
    config: type = LinearMethodConfig
    topk_per_matrix: bool = False  # selects floor(top_k · numel) per scored matrix (so a tiny top_k selects nothing)
    uses_filters: bool = True  # False: the runner computes no statistics of the filter sets for it

    def __post_init__(self) -> None:
        unknown = [k for k in self.needs if k not in KINDS]
        if unknown or not self.needs:
            raise ValueError(f"method {self.name!r}: needs must be some of {', '.join(KINDS)}, got {self.needs!r}")
        if not (isinstance(self.config, type) and issubclass(self.config, MethodConfig)
                and dataclasses.is_dataclass(self.config)):
            raise TypeError(f"method {self.name!r}: config must be a dataclass subclassing MethodConfig, "
                            f"got {self.config!r}")

    def __call__(self, inputs: MethodInputs, cfg: Any) -> Selection:
        return self.fn(inputs, cfg)


# A plain function named by import path scores linears and has the shared settings only.
METHODS: Registry[MethodSpec] = Registry("method", "method.name", MethodSpec, ATTRIBUTE,
                                         plain=lambda fn, name: MethodSpec(name, fn))
for _name in BUILTIN_METHODS:
    METHODS.register(_name, f"mathneuro.methods.builtin:{_name}_method")


def register_method(name: str, target: str | None = None, *, needs: Sequence[str] = ("linear_inputs",),
                    config: type = LinearMethodConfig, topk_per_matrix: bool = False, uses_filters: bool = True,
                    replace: bool = False):
    """Register a method under ``name``; a decorator, or with ``target="module:attr"`` a lazy entry.

    ``needs``: the statistics kinds (``linear_inputs``, ``lape``) the runner computes for it;
    ``config``: its config dataclass (subclass :class:`MethodConfig` / :class:`LinearMethodConfig`);
    ``topk_per_matrix``: it keeps floor(top_k · numel) weights per matrix, which lets the runner
    refuse a top_k too small to select anything before computing statistics;
    ``uses_filters``: False for a method that scores the task set alone (Wanda), so that no forward
    pass over the filter sets is spent on it (its ``MethodInputs.filters`` is then empty).
    """
    if target is not None:
        METHODS.register(name, target, replace=replace)
        return None

    return METHODS.decorator(name, lambda fn: MethodSpec(name, fn, tuple(needs), config,
                                                          topk_per_matrix, uses_filters),
                             replace=replace)


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


def _node_dict(node: Any) -> dict[str, Any]:
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
    data = _node_dict(node)
    target = data.pop("_target_", None)
    name = str(target or data.get("name") or "")
    if not name:
        raise ValueError(f"{key}.name: empty; allowed: {', '.join(METHODS.names())}")
    spec = METHODS.get(name)
    if target:
        data["name"] = spec.name
    names = {f.name for f in dataclasses.fields(spec.config)}
    ignorable = set(_builtin_fields()) | {"name"}
    unknown = [k for k in data if k not in names and k not in ignorable]
    if unknown:
        allowed = ", ".join(sorted(names - {"name"})) or "none"
        raise ValueError(f"{key}.{unknown[0]}: not a setting of method {spec.name!r}; its settings: {allowed}")
    cfg = _structured(spec.config, {k: v for k, v in data.items() if k in names}, key)
    validate = getattr(cfg, "validate", None)
    if callable(validate):
        validate(key)
    return spec, cfg


def _structured(cls: type, values: dict[str, Any], key: str) -> Any:
    """``cls(**values)`` type-checked by OmegaConf; a bad value is a ValueError naming the key."""
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    try:
        return OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(cls), values))
    except OmegaConfBaseException as exc:
        where = getattr(exc, "full_key", None) or ""
        msg = str(exc).splitlines()[0]
        raise ValueError(f"{key}.{where}: {msg}" if where else f"{key}: {msg}") from None


def method_name(node: Any) -> str:
    """The name a method config node gives (its ``_target_`` if set), without importing anything."""
    data = _node_dict(node)
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
