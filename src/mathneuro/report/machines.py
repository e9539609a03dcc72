"""Kinds of machine in the committed records, and the pairings of kinds an analysis plan names.

bf16 rounds differently on CPUs with different kernel units (AMX against AVX512-BF16): the unedited model
alone, evaluated on an AMD EPYC and an Intel Xeon with AMX, answers 5 of 300 GSM8K questions, 3 of 154 MATH
problems and 20 of 1,140 MMLU questions differently. A paired difference of two records from different kinds
of machine carries that difference in its estimate, so the claims table pairs records of one kind only,
unless the plan names the pairing (:func:`parse_pairings`).

- :func:`kind_key` is THE kind: the device's name with its CPU's kernel flags (``cpu_flags``, the features
  that pick the bf16 kernels), e.g. ``AMD EPYC (avx512_bf16+avx512f+avx2)``; a CPU recorded without its
  flags is ``<name> (CPU flags not recorded)``, never given flags it did not record; a GPU is its name.
  Two records are of one kind when their keys are equal; a record without hardware has no key.
- :func:`task_machine` reads which machine computed one task of a packed record: a point's own (or the
  run of its ``runs`` that evaluated the task), a baseline's ``task_hardware`` entry (or its ``hardware``).
  Hardware noted after the run (a ``noted`` field) keeps its key and is labelled "noted, not recorded".
- :func:`parse_pairings` reads the pairings a plan names, for one records folder. The canonical place is a
  fenced ``cross-kind-pairings`` block (its entries govern :data:`RECORDS` unless they name ``"records"``);
  an amendment's machine-readable block (``<!-- NAME:begin -->`` with a JSON object, e.g. the confirmatory
  amendment's) may list the same entries under ``machine_kind.cross_kind_pairings``: they govern that block's
  ``records`` folder only. One mechanism, two places to write it; a pairing never crosses records folders.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from mathneuro.models.devices import machine_kind


class HasHeader(Protocol):
    """A packed record as this module reads it (``Packed`` of ``experiments/claims/claimslib/records.py``): its
    header only. A protocol, not an import: the library never imports the experiments' code, and records.py
    imports this module to label machines at pack time."""

    header: dict[str, Any]


NOT_RECORDED = "not recorded"
NOTED = "noted, not recorded"
#: The fenced block of an analysis plan that names cross-kind pairings (a JSON list; see :func:`parse_pairings`).
PAIRINGS_BLOCK = "cross-kind-pairings"
#: The records folder a pairing governs unless it names another (the amended plan's records).
RECORDS = "experiments/records"


def kind_key(hardware: Mapping[str, Any] | None) -> str | None:
    """The kind of machine of a record's ``hardware`` (see the module docstring); None where none is recorded.
    The kind is :func:`mathneuro.models.devices.machine_kind` (the runs' own same-machine checks use it), with
    "(CPU flags not recorded)" written out where a CPU record carries no ``cpu_flags``: the same partition of
    machines, said so that nobody reads an unflagged CPU as one without bf16 units."""
    kind = machine_kind(dict(hardware) if hardware else None)
    if kind is None or hardware.get("cpu_flags"):
        return kind
    on_cpu = str(hardware.get("device") or "cpu").startswith("cpu") and "cuda" not in hardware
    return f"{kind} (CPU flags not recorded)" if on_cpu else kind


def machines_differ(edited: Mapping[str, Any], reference: Mapping[str, Any] | None) -> tuple[str, str] | None:
    """The two kinds of machine when a point's results (``edited``) and its reference differ in kind, else None.
    The reference is another point's results, or None for the unedited model, whose machine is the point's
    ``baseline_hardware`` (the point's own where it names none). Sides without recorded hardware do not clash:
    their kind is unknown, not different."""
    mine = kind_key(edited.get("hardware"))
    theirs = kind_key((edited.get("baseline_hardware") or edited.get("hardware")) if reference is None
                      else reference.get("hardware"))
    return (mine, theirs) if mine and theirs and mine != theirs else None


@dataclass(frozen=True)
class Machine:
    """The machine that computed one task of one record: its kind (None: not recorded) and how it is known."""

    key: str | None
    how: str = "recorded"  # recorded | noted, not recorded | not recorded

    @property
    def label(self) -> str:
        if self.key is None:
            return NOT_RECORDED
        return self.key if self.how == "recorded" else f"{self.key}, {self.how}"


def machine_of(hardware: Mapping[str, Any] | None) -> Machine:
    """The machine of one ``hardware`` record (its kind, and whether it was recorded or noted)."""
    key = kind_key(hardware)
    if key is None:
        return Machine(None, NOT_RECORDED)
    return Machine(key, NOTED if (hardware or {}).get("noted") else "recorded")


def task_machine(packed: HasHeader, task: str) -> Machine:
    """The machine that computed ``task`` of ``packed`` (a point's run that evaluated it, a baseline's task)."""
    header = packed.header
    if packed.kind == "baseline":
        return machine_of((header.get("task_hardware") or {}).get(task) or header.get("hardware"))
    for run in header.get("runs") or []:
        if task in (run.get("tasks") or ()):
            return machine_of(run.get("hardware"))
    return machine_of(header.get("hardware"))


@dataclass(frozen=True)
class Pairing:
    """A cross-kind pairing the plan names: these tests (plan labels such as ``1a``) may pair these two kinds."""

    tests: tuple[str, ...]
    kinds: frozenset[str]
    amendment: str = ""
    records: str = RECORDS  # the records folder whose comparisons it governs

    def allows(self, group: str, a: str | None, b: str | None) -> bool:
        return group in self.tests and a is not None and b is not None and frozenset((a, b)) == self.kinds


def _pairing(entry: Any, where: str, records: str, amendment: str = "") -> Pairing:
    tests, kinds = entry.get("tests") if isinstance(entry, dict) else None, (entry or {}).get("kinds")
    if not isinstance(tests, list) or not isinstance(kinds, list) or len(kinds) != 2:
        raise ValueError(f"{where}: entry {entry!r} needs \"tests\": [...] and two \"kinds\"")
    return Pairing(tuple(map(str, tests)), frozenset(map(str, kinds)), str(entry.get("amendment", amendment)),
                   str(entry.get("records", records)).rstrip("/"))


def amendment_blocks(plan_text: str) -> dict[str, dict]:
    """``{name: object}`` of every machine-readable block of a plan: ``<!-- NAME:begin -->``, a fenced JSON
    object, ``<!-- NAME:end -->`` (e.g. the confirmatory amendment's). Raises ValueError naming a block that
    is not JSON."""
    out = {}
    pattern = r"<!-- ([\w-]+):begin -->\s*```json[ \t]*\n(.*?)^```\s*<!-- \1:end -->"
    for name, body in re.findall(pattern, plan_text, flags=re.M | re.S):
        try:
            out[name] = json.loads(body)
        except ValueError as err:
            raise ValueError(f"{name} block: not JSON ({err})") from None
    return out


def parse_pairings(plan_text: str, records: str | None = RECORDS) -> list[Pairing]:
    """The cross-kind pairings a plan names for the comparisons among the records under ``records`` (None:
    every folder's). Canonical: every fenced block whose info string is ``cross-kind-pairings`` holds a JSON
    list of ``{"tests": ["1a", ...], "kinds": ["<kind A>", "<kind B>"], "amendment": "<date>"[, "records":
    "<folder>"]}`` (kinds as :func:`kind_key` writes them; records: :data:`RECORDS` unless named). An
    amendment's machine-readable block (:func:`amendment_blocks`) may list the same entries under
    ``machine_kind.cross_kind_pairings``; they govern its ``records`` folder. None named: no pairing (the
    default). Raises ValueError naming the block's problem."""
    out: list[Pairing] = []
    for block in re.findall(rf"^```{PAIRINGS_BLOCK}[ \t]*\n(.*?)^```", plan_text, flags=re.M | re.S):
        try:
            entries = json.loads(block)
        except ValueError as err:
            raise ValueError(f"{PAIRINGS_BLOCK} block: not JSON ({err})") from None
        out += [_pairing(e, f"{PAIRINGS_BLOCK} block", RECORDS) for e in (entries if isinstance(entries, list)
                                                                           else [entries])]
    for name, block in amendment_blocks(plan_text).items():
        entries = (block.get("machine_kind") or {}).get("cross_kind_pairings") if isinstance(block, dict) else None
        if entries is None:
            continue
        if not isinstance(entries, list):
            raise ValueError(f"{name} block: machine_kind.cross_kind_pairings is not a list")
        out += [_pairing(e, f"{name} block", str(block.get("records") or RECORDS), str(block.get("id") or name))
                for e in entries]
    return [p for p in out if records is None or p.records == records.rstrip("/")]


def allowed(pairings: Iterable[Pairing], group: str, a: Machine, b: Machine) -> bool:
    """Whether a test (its plan label ``group``) may pair a record computed on ``a`` with one on ``b``: the
    same recorded kind, or a pairing the plan names. A machine not recorded pairs with nothing."""
    if a.key is None or b.key is None:
        return False
    return a.key == b.key or any(p.allows(group, a.key, b.key) for p in pairings)
