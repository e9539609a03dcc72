"""What an intervention is: its config dataclass (:class:`InterventionConfig`), what it is given
(:class:`InterventionContext`) and its registered description with every fact the pipeline needs
about it (:class:`InterventionSpec`).

The runner, the config checks, ``results.json`` and the reports never test an intervention by
name: what differs between interventions is written here, on the spec, where the intervention
registers (see ``docs/extending.md``). A user's intervention declares the same facts as a built-in.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from mathneuro.edit.undoable import Intervention
from mathneuro.methods.registry import METHOD_NAMES, METHODS
from mathneuro.methods.selection import Selection
from mathneuro.methods.spec import UNITS
from mathneuro.util.plugins import PluginSpec, plain

#: What an intervention may ask the runner for besides the model and the selection:
#: ``task_samples``, the point's draw of the task set (its rendered texts; the identification samples).
NEEDS = ("task_samples",)


@dataclass
class InterventionConfig:
    """Settings every intervention has: its name (as given in the config)."""

    name: str = "prune"

    def validate(self, key: str = "intervention") -> None:
        """Raise ValueError naming ``<key>.<field>`` for a bad value (subclasses add their checks)."""


@dataclass
class InterventionContext:
    """What an intervention is given: the model to edit in place, its tokenizer, the selection, the
    point's seed, and what it declared in ``needs`` (else None).

    ``task_texts``: the point's draw of the task set, rendered (``needs=("task_samples",)``), with
    ``task_name`` and ``task_ids_hash`` identifying it; ``max_length`` / ``batch_size``: the point's
    calibration settings; ``log(metrics, step)``: a W&B curve point (a no-op without a logger).
    """

    model: torch.nn.Module
    tokenizer: Any
    selection: Selection
    seed: int = 0
    task_texts: list[str] | None = None
    task_name: str = ""
    task_ids_hash: str = ""
    max_length: int = 512
    batch_size: int = 8
    progress: bool = False
    log: Callable[[dict, int], None] = lambda metrics, step: None

    def require(self, need: str) -> Any:
        """The value of a declared need; a ValueError if the runner did not give it."""
        value = {"task_samples": self.task_texts}[need]
        if value is None:
            raise ValueError(f"intervention: needs {need!r} but none was given (declare needs=({need!r},))")
        return value


@dataclass(frozen=True)
class InterventionSpec(PluginSpec):
    """A registered intervention and its facts.

    - ``fn(ctx, cfg) -> Intervention``: edits ``ctx.model`` in place and returns the undo handle;
    - ``config``: its settings dataclass (subclass of :class:`InterventionConfig`);
    - ``units``: the selection units it can edit (``weights``, ``neurons``); another unit is refused
      with one line before any model loads;
    - ``needs``: what else it needs from the runner (:data:`NEEDS`);
    - ``point_fields``: settings recorded in ``results.json``'s ``point`` so reports group and pair by
      them: ``scalar`` at the top level, any other under ``point.intervention_args``;
    - ``identity``: ``f(cfg) -> JSON value`` naming the edit for the kept partial results of an attempt
      cut short (default: every setting);
    - ``exportable``: False where its edit can never be saved as weights (``export_model`` is refused).
    """

    name: str
    fn: Callable[[InterventionContext, Any], Intervention]
    config: type = InterventionConfig
    units: tuple[str, ...] = UNITS
    needs: tuple[str, ...] = ()
    point_fields: tuple[str, ...] = ()
    identity: Callable[[Any], Any] | None = None
    exportable: bool = True
    description: str = ""
    kind = "intervention"

    def __post_init__(self) -> None:
        units, needs = tuple(self.units), tuple(self.needs)
        if not units or any(u not in UNITS for u in units):
            raise ValueError(f"intervention {self.name!r}: units must be some of {', '.join(UNITS)}, got {units!r}")
        if any(n not in NEEDS for n in needs):
            raise ValueError(f"intervention {self.name!r}: needs must be some of {', '.join(NEEDS)}, got {needs!r}")
        object.__setattr__(self, "units", units)
        object.__setattr__(self, "needs", needs)
        self.check_config(InterventionConfig)
        self.check_settings(self.point_fields)

    def __call__(self, ctx: InterventionContext, cfg: Any) -> Intervention:
        handle = self.fn(ctx, cfg)
        if not isinstance(handle, Intervention):
            raise TypeError(f"intervention {self.name!r} returned {type(handle).__name__}, not an Intervention")
        return handle

    def check_unit(self, unit: str, method: str, key: str = "intervention.name") -> None:
        """Refuse (ValueError naming ``key``) a selection unit this intervention cannot edit."""
        if unit not in self.units:
            fit = [name for name in METHOD_NAMES if METHODS.get(name).unit in self.units]  # built-ins that would
            hint = f"; a method that selects {' or '.join(self.units)}: {', '.join(f'method={n}' for n in fit)}"
            raise ValueError(f"{key}: intervention {self.name!r} edits {' or '.join(self.units)} selections; "
                             f"method {method!r} selects {unit}" + (hint if fit else ""))

    def point(self, cfg: Any) -> dict[str, Any]:
        """Its fields of ``results.json``'s ``point``: ``scalar`` (None where it has none) and, for its other
        point fields, ``intervention_args``."""
        out: dict[str, Any] = {"scalar": plain(getattr(cfg, "scalar", None)) if "scalar" in self.point_fields
                               else None}
        args = self.plain_settings(cfg, (name for name in self.point_fields if name != "scalar"))
        if args:
            out["intervention_args"] = args
        return out

    def edit_identity(self, cfg: Any) -> Any:
        """What names this edit (with the selection) for kept partial results: ``identity(cfg)``, else every
        setting with the name."""
        if self.identity is not None:
            return self.identity(cfg)
        return {"intervention": self.name, **self.plain_settings(cfg, self.settings())}

    def facts(self) -> dict[str, Any]:
        """The facts a report needs, as plain data (``results.json``'s ``intervention_facts``)."""
        return {"units": list(self.units), "needs": list(self.needs), "point_fields": list(self.point_fields)}


def check_positive(value: Any, key: str, kind: type = float) -> None:
    """Raise ValueError naming ``key`` unless ``value`` is a positive number (of ``kind``)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0 or (
            kind is int and int(value) != value):
        raise ValueError(f"{key}: must be a positive {'integer' if kind is int else 'number'}, got {value!r}")


def check_choice(value: Any, key: str, allowed: Sequence[str]) -> None:
    """Raise ValueError naming ``key`` unless ``value`` is one of ``allowed``."""
    if value not in allowed:
        raise ValueError(f"{key}: unknown value {value!r}; allowed: {', '.join(allowed)}")


__all__ = ["NEEDS", "UNITS", "InterventionConfig", "InterventionContext", "InterventionSpec", "check_choice",
           "check_positive"]
