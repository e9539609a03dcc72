"""Size-matched random references: which method sizes a random reference, with which settings.

A random reference method (``random`` for weights, ``random_neurons`` for neurons) keeps, in every
matrix or MLP layer, as many entries as the method it is sized by selects there, drawn at random:
that method's size without its choice. The sizing method is named by the reference's setting
``reference`` (a registered name or ``pkg.mod:fn``), its own settings given in ``reference_args``;
the settings the two configs share pass through.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from mathneuro.methods.registry import METHODS, resolve_method
from mathneuro.methods.selection import Selection
from mathneuro.methods.spec import MethodInputs, MethodSpec


def cannot_size(spec: MethodSpec, unit: str, needs: tuple[str, ...]) -> str | None:
    """Why ``spec`` cannot size a random reference of ``unit`` computed from ``needs`` (None: it can)."""
    if spec.is_reference:
        return f"{spec.name} is itself a random reference"
    if spec.unit != unit:
        other = "random" if spec.unit == "weights" else "random_neurons"
        return f"it selects {spec.unit}, not {unit}; its reference is {other}"
    missing = [k for k in spec.needs if k not in needs]
    if missing:
        return f"it needs {', '.join(missing)} statistics, which a {unit} reference does not compute"
    return None


def sizing_methods(unit: str, needs: tuple[str, ...]) -> list[str]:
    """Registered methods that can size a random reference of ``unit`` (lazy entries that fail to import aside)."""
    names = []
    for name in METHODS.names():
        try:
            spec = METHODS.get(name)
        except Exception:  # noqa: BLE001 - a user's lazy entry that fails to import is simply not offered
            continue
        if cannot_size(spec, unit, needs) is None:
            names.append(name)
    return names


def sizing_spec(name: str, unit: str, needs: tuple[str, ...], reference: str, key: str) -> MethodSpec:
    """The method called ``name`` if it can size the reference ``reference``; else ValueError naming ``key``."""
    try:
        spec = METHODS.get(name)
        why = cannot_size(spec, unit, needs)
    except ValueError as exc:
        why = str(exc).split(": ", 1)[-1].split(";")[0]  # "unknown method 'x'" or why its import failed
    if why is None:
        return spec
    raise ValueError(f"{key}: {name!r} cannot size {reference} ({why}); allowed: "
                     f"{', '.join(sizing_methods(unit, needs))}, or an import path 'package.module:function'")


def sizing_config(cfg: Any, spec_of_reference: MethodSpec, key: str = "method") -> tuple[MethodSpec, Any]:
    """The method sizing the reference config ``cfg`` and its validated config: the settings ``cfg`` shares
    with it, then ``cfg.reference_args``; a bad one is a ValueError naming ``<key>.reference_args.<setting>``."""
    name = spec_of_reference.sizing(cfg)
    spec = sizing_spec(name, spec_of_reference.unit, spec_of_reference.needs, spec_of_reference.name,
                       f"{key}.{spec_of_reference.sized_by}")
    fields = set(spec.settings())
    shared = {f: getattr(cfg, f) for f in fields if hasattr(cfg, f)}
    return resolve_method({**shared, **dict(cfg.reference_args or {}), "name": name}, f"{key}.reference_args")


def sizing_counts(inputs: MethodInputs, cfg: Any, spec_of_reference: MethodSpec) -> tuple[dict[str, int], dict]:
    """The per-matrix (or per-layer) counts and the metadata of the selection sizing ``cfg``: all a random
    reference needs. Read from ``inputs.sizes`` when the same selection was made on the same inputs before
    (a sweep's MathNeuro point, then its random point), else computed and remembered there."""
    spec, sized_cfg = sizing_config(cfg, spec_of_reference)
    sized_inputs = _sizing_inputs(inputs, spec, sized_cfg)
    key = size_key(spec.name, sized_cfg, sized_inputs)
    size = inputs.sizes.get(key) if inputs.sizes is not None else None
    if size is None:
        size = remember_size(inputs.sizes, key, spec(sized_inputs, sized_cfg))
    unit, counts, meta = size
    _check_unit(spec.name, unit, spec_of_reference)
    return dict(counts), dict(meta)


def size_key(name: str, cfg: Any, inputs: MethodInputs) -> str:
    """What a selection's size depends on besides the inputs' statistics and weights: the method, its
    settings, top-K, the seed and how many filter sets it was given."""
    settings = dataclasses.asdict(cfg) if dataclasses.is_dataclass(cfg) else dict(cfg)
    return json.dumps([name, settings, inputs.top_k, inputs.seed, len(inputs.filters)], sort_keys=True, default=str)


def remember_size(sizes: dict | None, key: str, selection: Selection) -> tuple[str, dict[str, int], dict]:
    """Keep ``selection``'s unit, counts and metadata in ``sizes`` under ``key`` (when given); return them."""
    size = ("neurons" if selection.neurons else "weights", selection.counts(), dict(selection.meta))
    if sizes is not None:
        sizes[key] = size
    return size


def _sizing_inputs(inputs: MethodInputs, spec: MethodSpec, sized_cfg: Any) -> MethodInputs:
    return inputs if spec.uses_filters and sized_cfg.uses_filters() else dataclasses.replace(inputs, filters=[])


def _check_unit(name: str, unit: str, spec_of_reference: MethodSpec) -> None:
    if unit != spec_of_reference.unit:
        raise ValueError(f"method.reference={name!r} selected {unit}; "
                         f"{spec_of_reference.name} matches {spec_of_reference.unit} counts only")


def sizing_uses_filters(cfg: Any, spec_of_reference: MethodSpec) -> bool:
    """Whether the method sizing ``cfg`` needs the filter sets (random sized by Wanda does not)."""
    spec, sized_cfg = sizing_config(cfg, spec_of_reference)
    return spec.uses_filters and sized_cfg.uses_filters()
