"""What every kind of plugin shares: methods, interventions and statistics kinds.

A plugin is a spec (a frozen dataclass that mixes in :class:`PluginSpec`) found by name in a
:class:`~mathneuro.util.registry.Registry`. Its config node (``method``, ``intervention``) names it by
``name`` or ``_target_``; the node's other keys fill the spec's config dataclass. This module holds
the rules all plugin kinds follow: reading a node (:func:`node_dict`, :func:`plugin_name`),
resolving it to a spec and a validated config (:func:`resolve`), the settings someone set that the
chosen plugin lacks (:func:`unused_settings`), the check of the facts given at registration
(:func:`check_facts`), and the JSON form settings are compared and recorded in (:func:`plain`).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

__all__ = [
    "PluginSpec", "builtin_fields", "check_facts", "field_default", "node_dict", "override_key", "plain",
    "plugin_name", "resolve", "setting_overrides", "structured_config", "unused_settings",
]


def field_default(f: dataclasses.Field) -> Any:
    """A dataclass field's default (its factory called), or ``dataclasses.MISSING``."""
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return dataclasses.MISSING


class PluginSpec:
    """Mixed into a plugin's spec dataclass (which has ``name`` and ``config``, a settings dataclass or None):
    its settings, their defaults, the recorded form of chosen ones, and the checks of its config."""

    name: str
    config: Any
    kind = "plugin"

    def settings(self) -> list[str]:
        """The names of its settings (``name`` aside)."""
        if self.config is None:
            return []
        return [f.name for f in dataclasses.fields(self.config) if f.name != "name"]

    def default(self, setting: str) -> Any:
        """The dataclass default of ``setting`` (None if it has none)."""
        for f in dataclasses.fields(self.config) if self.config is not None else ():
            if f.name == setting:
                value = field_default(f)
                return None if value is dataclasses.MISSING else value
        return None

    def plain_settings(self, cfg: Any, names: Iterable[str]) -> dict[str, Any]:
        """``{name: value}`` of the settings ``names`` of ``cfg``, as plain JSON data."""
        return {name: plain(getattr(cfg, name)) for name in names}

    def check_config(self, base: type) -> None:
        """TypeError unless ``config`` is a dataclass subclassing ``base``."""
        if not (isinstance(self.config, type) and issubclass(self.config, base)
                and dataclasses.is_dataclass(self.config)):
            raise TypeError(f"{self.kind} {self.name!r}: config must be a dataclass subclassing {base.__name__}, "
                            f"got {self.config!r}")

    def check_settings(self, names: Iterable[str]) -> None:
        """ValueError for a name in ``names`` that is not one of its config's fields."""
        fields = {f.name for f in dataclasses.fields(self.config)}
        for name in names:
            if name not in fields:
                raise ValueError(f"{self.kind} {self.name!r}: {name!r} is not a setting of {self.config.__name__}")

    def stale_setting(self, recorded: Mapping[str, Any], cfg: Any, skip: Iterable[str | None] = ()) -> str | None:
        """Why settings ``recorded`` (a missing one: its default) differ from ``cfg``'s, naming the first; None if
        alike (``skip``: settings not compared)."""
        skip = set(skip)
        for name in (n for n in self.settings() if n not in skip):
            old, new = plain(recorded.get(name, self.default(name))), plain(getattr(cfg, name, None))
            if old != new:
                return f"made with {self.kind}.{name}={old}, this run asks for {new}"
        return None


def check_facts(register: str, name: str, spec_type: type, facts: Mapping[str, Any], given: Iterable[str]) -> None:
    """TypeError naming the first of ``facts`` that is no field of ``spec_type`` (``given``: the fields the
    register function sets itself)."""
    known = {f.name for f in dataclasses.fields(spec_type)} - {"name", *given}
    unknown = sorted(set(facts) - known)
    if unknown:
        raise TypeError(f"{register}({name!r}): unknown fact {unknown[0]!r}; known: {', '.join(sorted(known))}")


def plain(value: Any) -> Any:
    """A value as plain JSON data (OmegaConf nodes and dataclasses as containers, other objects as
    strings), so that recorded and current values compare alike."""
    try:
        from omegaconf import DictConfig, ListConfig, OmegaConf

        if isinstance(value, (DictConfig, ListConfig)):
            value = OmegaConf.to_container(value, resolve=True)
    except ImportError:  # pragma: no cover - omegaconf is a dependency
        pass
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        value = dataclasses.asdict(value)
    return json.loads(json.dumps(value, sort_keys=True, default=str))


def override_key(override: str) -> str:
    """The key a command-line override sets (``+``/``++``/``~`` and the value stripped)."""
    return override.lstrip("+~").split("=", 1)[0]


def setting_overrides(overrides: Iterable[str], key: str) -> list[str]:
    """The ``<key>.<setting>`` keys an override list sets (``<key>.name`` and ``<key>._target_`` aside)."""
    keys = [override_key(item) for item in overrides]
    return [k for k in keys if k.startswith(f"{key}.") and k not in (f"{key}.name", f"{key}._target_")]


def node_dict(node: Any) -> dict[str, Any]:
    """A config node (DictConfig, dataclass, mapping, a bare name) as a plain dict."""
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


def plugin_name(node: Any) -> str:
    """The name a config node gives (its ``_target_`` if set), without importing anything."""
    data = node_dict(node)
    return str(data.get("_target_") or data.get("name") or "")


def builtin_fields(registry: Any, names: Iterable[str]) -> dict[str, Any]:
    """Every setting of the plugins ``names`` of ``registry`` with its default (the first plugin's where
    two share a setting): the keys the kind's config node always accepts."""
    out: dict[str, Any] = {}
    for name in names:
        for f in dataclasses.fields(registry.get(name).config):
            value = field_default(f)
            if value is not dataclasses.MISSING:
                out.setdefault(f.name, value)
    return out


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


def resolve(registry: Any, node: Any, key: str, builtin: Mapping[str, Any],
            own_defaults_win: bool = False) -> tuple[Any, Any]:
    """The spec of ``registry`` a config node names and its validated config instance.

    ``_target_`` wins over ``name``. Keys that are settings of other built-ins (``builtin``: their
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
    unknown = [k for k in data if k not in names and k not in builtin and k != "name"]
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


def unused_settings(node: Any, spec: Any, key: str, defaults: Mapping[str, Any],
                    given: Sequence[str] = ()) -> list[str]:
    """``<key>.<setting>`` of every setting in the config node that the chosen plugin ``spec`` lacks and
    that someone set: named in the overrides ``given`` (``<key>.<setting>=...``; a bare ``<setting>`` may be a
    top-level key such as ``seed``) or holding another value than its schema default (``defaults``)."""
    own = set(spec.settings()) | {"name", "_target_"}
    named = {override_key(g).removeprefix(f"{key}.") for g in given if override_key(g).startswith(f"{key}.")}
    return sorted(f"{key}.{k}" for k, v in node_dict(node).items() if k not in own and (
        k in named or (k in defaults and plain(v) != plain(defaults[k]))))
