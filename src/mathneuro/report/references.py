"""Which random reference a method is compared with in ``paired.csv``, from the methods' facts.

A random reference method (``random``, ``random_neurons``) sized by method X is named ``random(X)``, or by
its method's name alone when sized by its default (MathNeuro for ``random``, LAPE for ``random_neurons``).
It serves X under either of X's names, and, where its facts say so (``random`` at MathNeuro's size, the
paper's baseline), every method. The facts come from ``results.json`` (``method_facts``) or, for older
results, from the method registry.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mathneuro.methods.registry import method_facts, same_method


def facts_of(result: Mapping) -> dict:
    """The recorded facts of a result's method (``method_facts``), else the registry's (older results)."""
    facts = result.get("method_facts")
    if isinstance(facts, Mapping):
        return dict(facts)
    return method_facts(str((result.get("point") or {}).get("method")))


def reference_name(point: Mapping, facts: Mapping | None = None) -> str | None:
    """The name a random-reference point goes by in ``paired.csv`` (None for an edited point): its method
    (``random``, ``random_neurons``) when sized by its default method, ``random(<method>)`` when sized by
    another (``point.reference``)."""
    facts = method_facts(str(point.get("method"))) if facts is None else facts
    if not facts.get("sized_by"):
        return None
    method, sized_by = str(point.get("method")), point.get("reference")
    default = facts.get("default_sized_by")
    return method if sized_by in (None, "", default) else f"{method}({sized_by})"


def sized_by(reference: str, facts: Mapping) -> str:
    """The method a reference name (:func:`reference_name`) was sized by."""
    head, _, rest = reference.partition("(")
    return rest[:-1] if rest.endswith(")") else str(facts.get("default_sized_by") or "")


def serves(reference: str, method: Any, facts: Mapping | None = None) -> bool:
    """Whether the random reference ``reference`` (a :func:`reference_name`) is compared with ``method``:
    the method that sized it, under either of its names (registered, or ``pkg.mod:fn``), and every method
    where the reference at its default size is the baseline for all (``random``, MathNeuro's size)."""
    facts = method_facts(reference.partition("(")[0]) if facts is None else facts
    sizing = sized_by(reference, facts)
    if same_method(sizing, str(method)):
        return True
    return "(" not in reference and bool(facts.get("compared_with_every_method"))


def missing_own_size_references(groups: Mapping[tuple, list], randoms: Mapping[str, Mapping],
                                facts: Mapping[str, dict]) -> list[str]:
    """One note per edited method that has no random reference at its own size in the sweep, saying what to run."""
    notes = []
    for method in sorted({str(members[0][0].get("point", {}).get("method")) for members in groups.values()}):
        own = facts.get(method) or {}
        reference = own.get("reference")
        if own.get("sized_by") or not reference:
            continue
        if not any(name.partition("(")[0] == reference and same_method(sized_by(name, facts[name]), method)
                   for name in randoms):
            notes.append(f"{method}: no {reference} point sized by it; for a reference of its own size run "
                         f"method={reference} method.reference={method}")
    return notes
