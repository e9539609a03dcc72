"""Name -> object registries with lazy ``"module:attr"`` entries and import paths as names.

Methods, interventions, statistics kinds and probes are found by name in a :class:`Registry`. An
entry is the object itself or a string ``"package.module:attr"`` imported on first use, so
registering costs no import. A name that is not registered but looks like an import path
(``my_pkg.my_mod:my_fn`` or ``my_pkg.my_mod.my_fn``) is imported too: a user's plugin runs by
naming it in a config, with no edit to this package. Unknown names fail with one line naming the
key, a close match and the registered names.
"""

from __future__ import annotations

import difflib
import importlib
import sys
from collections.abc import Callable, Iterator
from typing import Any, Generic, TypeVar

T = TypeVar("T")


def import_object(path: str) -> Any:
    """The object at ``"pkg.mod:attr"`` (``attr`` may be dotted) or ``"pkg.mod.attr"``.

    Raises ImportError (module missing) or AttributeError (attribute missing).
    """
    if ":" in path:
        module_name, _, attr = path.partition(":")
    else:
        module_name, _, attr = path.rpartition(".")
    if not module_name or not attr:
        raise ImportError(f"{path!r} is not an import path (expected 'package.module:attribute')")
    obj: Any = importlib.import_module(module_name)
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj


def import_failure(path: str, exc: BaseException) -> str:
    """Why ``path`` did not import, in words: its module is missing (is it on PYTHONPATH?), failed while
    importing, or imported but lacks the attribute (then its close names: a misspelled function)."""
    module_name, _, attr = path.partition(":") if ":" in path else path.rpartition(".")
    module = sys.modules.get(module_name)
    if isinstance(exc, AttributeError) and module is not None:
        obj, missing, where = module, attr, f"module {module_name!r}"
        for part in attr.split("."):
            if not hasattr(obj, part):
                missing = part
                break
            obj, where = getattr(obj, part), f"{where[:-1]}.{part}'"
        names = [n for n in dir(obj) if not n.startswith("_")]
        close = difflib.get_close_matches(missing, names, n=3, cutoff=0.6)
        hint = f"; close names: {', '.join(close)}" if close else f"; its names: {', '.join(names[:12]) or 'none'}"
        return f"{where} imported but has no attribute {missing!r}{hint}"
    if isinstance(exc, ModuleNotFoundError) and exc.name and module_name.startswith(exc.name):
        return f"no module named {exc.name!r}; is its package on PYTHONPATH?"
    return f"{type(exc).__name__}: {exc}"


def looks_like_import_path(name: str) -> bool:
    """Whether ``name`` can only mean an import path: ``a.b:c`` or a dotted name."""
    return ":" in name or "." in name


class Registry(Generic[T]):
    """Named entries of one kind (``"method"``, ``"probe"``); ``key`` is the config key errors name.

    Entries are ``spec_type`` instances. An imported object is one, or a function decorated with
    this registry's decorator (which keeps its spec in the attribute ``attribute``), or, when
    ``plain`` is given, any other callable that ``plain(obj, name)`` wraps into a spec.
    """

    def __init__(self, kind: str, key: str, spec_type: type[T], attribute: str,
                 plain: Callable[[Any, str], T] | None = None) -> None:
        self.kind = kind
        self.key = key
        self.spec_type = spec_type
        self.attribute = attribute
        self._plain = plain
        self._entries: dict[str, T | str] = {}

    def _coerce(self, obj: Any, name: str) -> T:
        if isinstance(obj, self.spec_type):
            return obj
        spec = getattr(obj, self.attribute, None)
        if isinstance(spec, self.spec_type):
            return spec
        if self._plain is not None and callable(obj) and not isinstance(obj, type):
            return self._plain(obj, name)
        raise TypeError(f"expected a function registered as a {self.kind} or a {self.spec_type.__name__}, "
                        f"got {type(obj).__name__}")

    def decorator(self, name: str, make_spec: Callable[[Callable], T], *, replace: bool = False):
        """A decorator that registers ``make_spec(fn)`` under ``name`` and keeps the spec on ``fn``."""
        def decorate(fn: Callable) -> Callable:
            spec = make_spec(fn)
            setattr(fn, self.attribute, spec)
            self.register(name, spec, replace=replace)
            return fn

        return decorate

    def register(self, name: str, entry: T | str, *, replace: bool = False) -> None:
        """Add ``name``; ``entry`` is the object or a lazy ``"module:attr"`` string.

        Registering a name again with another object raises ValueError unless ``replace``; a lazy
        entry may always be replaced by the object it names (that is what importing it does).
        """
        current = self._entries.get(name)
        if current is not None and not replace and not isinstance(current, str) and current is not entry:
            raise ValueError(f"{self.kind} {name!r} is already registered; pass replace=True to override it")
        self._entries[name] = entry

    def names(self) -> list[str]:
        """Every registered name, sorted."""
        return sorted(self._entries)

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def get(self, name: str) -> T:
        """The entry called ``name`` (a registered name or an import path); ValueError if there is none."""
        name = str(name).strip()
        if name in self._entries:
            entry = self._entries[name]
            if isinstance(entry, str):
                value = self._coerce(import_object(entry), name)
                self._entries[name] = value
                return value
            return entry
        if looks_like_import_path(name):
            try:
                obj = import_object(name)
            except (ImportError, AttributeError) as exc:
                raise ValueError(f"{self.key}: cannot import {self.kind} {name!r}: "
                                 f"{import_failure(name, exc)}") from None
            try:
                return self._coerce(obj, name)
            except TypeError as exc:
                raise ValueError(f"{self.key}: {name!r} is not a {self.kind} ({exc})") from None
        raise ValueError(self.unknown_message(name))

    def unknown_message(self, name: str) -> str:
        """One line: the key, the unknown name, a close match if any, the registered names."""
        close = difflib.get_close_matches(name, self.names(), n=1)
        hint = f" did you mean {close[0]!r}?" if close else ""
        return (f"{self.key}: unknown {self.kind} {name!r};{hint} allowed: {', '.join(self.names())}, "
                "or an import path 'package.module:attribute'")
