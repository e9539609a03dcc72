"""One object of a kind attached to each model object, held only as long as the model lives."""

from __future__ import annotations

import weakref
from typing import Any, Generic, TypeVar

T = TypeVar("T")


class PerModel(Generic[T]):
    """At most one ``T`` per model object (keyed weakly: the entry goes with the model)."""

    def __init__(self) -> None:
        self._by_model: weakref.WeakKeyDictionary[Any, T] = weakref.WeakKeyDictionary()

    def attach(self, model: Any, value: T | None) -> None:
        """Make ``value`` the one attached to ``model`` (None: none)."""
        if value is None:
            self._by_model.pop(model, None)
        else:
            self._by_model[model] = value

    def of(self, model: Any) -> T | None:
        """The one attached to ``model``, if any."""
        return self._by_model.get(model)


__all__ = ["PerModel"]
