"""Markdown of the claims table's parts that do not depend on one plan's claims: every test's row (with the
Monte Carlo errors of its ends), the comparisons refused for mixing machine kinds, and the lines naming the
machine and the code of every record (experiments/claims/claims.py writes the README section from these)."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from claimslib.claims import (
    AT_MARGIN,
    CLAIM_REFUSED,
    PART_REFUSED,
    REFUSED,
    claim_verdict,
    part_status,
)
from claimslib.records import Packed
from mathneuro.report.machines import Pairing, machine_of, task_machine


def fmt(x: float | None, signed: bool = True) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "—"
    return f"{x:+.3f}" if signed else f"{x:.3f}"


def estimate_text(row: dict) -> str:
    signed = row["test"].rule != "proportion"
    lo, hi = row["ci95"]
    return f"{fmt(row['estimate'], signed)} [{fmt(lo, signed)}, {fmt(hi, signed)}]"


def _p(value: float, resamples: int) -> str:
    return f"<{1 / resamples:.0e}" if value == 0 else f"{value:.3g}"


def _mc(errors: Sequence[float] | None) -> str:
    return "" if not errors else f"±{errors[0]:.4f}, ±{errors[1]:.4f}"


def across(row: dict, key: str) -> str:
    """A refused test's decision as it would read across machine kinds (context, not a decision)."""
    return f"refused (across kinds: {(row.get('across') or {}).get(key) or '—'})"


def key_numbers(rows: Sequence[dict]) -> str:
    """Per primary test group: the estimate with its 95 % interval, or the lowest and highest over conditions
    (a refused test's numbers marked: they pair two kinds of machine)."""
    groups: dict[str, list[dict]] = {}
    for row in rows:
        if row["test"].role == "primary" and row["status"] in ("ok", REFUSED):
            groups.setdefault(row["test"].group, []).append(row)
    parts = []
    for group, members in groups.items():
        members = sorted(members, key=lambda r: r["estimate"])
        text = (estimate_text(members[0]) if len(members) == 1
                else f"{estimate_text(members[0])} … {estimate_text(members[-1])}")
        mixed = " (mixes machine kinds)" if any(r["status"] == REFUSED for r in members) else ""
        parts.append(f"{group}: {text}{mixed}")
    return "; ".join(parts) or "—"


def tested_claim(mine: Sequence[dict], parts: Sequence[str]) -> tuple[str, str, str]:
    """(parts shown, unadjusted verdict, adjusted verdict) of a claim with tests; a claim refused for mixing
    machine kinds shows the verdict it would have had across kinds as context."""
    per_part = {p: [r for r in mine if r["test"].part == p] for p in parts}
    verdict = claim_verdict([part_status(v, adjusted=False) for v in per_part.values()])
    adjusted = claim_verdict([part_status(v) for v in per_part.values()])
    shown = []
    for p, v in per_part.items():
        status = part_status(v)
        shown.append(f"{p}: {status}" + (f" (across kinds: {part_status(v, across=True)})"
                                         if status == PART_REFUSED else ""))
    if adjusted == CLAIM_REFUSED:
        read_across = claim_verdict([part_status(v, across=True) for v in per_part.values()])
        adjusted += f" (across kinds it read: {read_across})"
    if verdict == CLAIM_REFUSED:
        verdict += (f" (across kinds: "
                    f"{claim_verdict([part_status(v, adjusted=False, across=True) for v in per_part.values()])})")
    return ", ".join(shown), verdict, adjusted


def test_rows(rows: Sequence[dict], resamples: int) -> list[str]:
    """One markdown row per test: D, n, the estimate and its intervals, the Monte Carlo error of the 95 %
    interval's ends (and the 90 %'s where it decides), p-values, decisions."""
    out = ["| test | comparison | task / metric | D | n | estimate [95 %] | 90 % | MC error of ends: 95 % (90 %) "
           "| up / down | per draw | margin / t | p supports / contradicts | decision | adjusted |", "|" + "---|" * 14]
    for row in rows:
        t = row["test"]
        if row["status"] not in ("ok", REFUSED):
            out.append(f"| {t.id} | {t.title} | {'/'.join(t.tasks[:1])} / {t.metric} | {row.get('draws', '—')} "
                       f"| {row.get('n', '—')} | {row['status']} |  |  |  |  |  |  |  |  |")
            continue
        equivalence = row.get("ci90") and t.rule == "equivalence"
        ci90 = f"[{fmt(row['ci90'][0])}, {fmt(row['ci90'][1])}]" if equivalence else ""
        mc = _mc(row.get("mc95")) + (f" ({_mc(row.get('mc90'))})" if equivalence else "")
        bound = (f"±{t.margin:.3g}" if t.margin is not None else
                 f"t = {row['threshold']:+.3f}" if row.get("threshold") is not None else "")
        p = "" if t.rule == "context" else f"{_p(row['p_support'], resamples)} / {_p(row['p_contra'], resamples)}"
        draws = ", ".join(f"{v:+.3f}" for v in row["draw_diffs"]) if t.rule != "proportion" else ""
        if row["status"] == REFUSED:
            decision, adjusted = (across(row, k) if t.rule != "context" else "refused" for k in ("decision", "holm"))
        else:
            decision, adjusted = row["decision"] or "—", row["holm"] or "—"
        out.append(f"| {t.id} | {t.title} | {row['task']} / {t.metric} | {row['draws']} | {row['n']} "
                   f"| {estimate_text(row)} | {ci90} | {mc} | {row['changed_up']} / {row['changed_down']} | {draws} "
                   f"| {bound} | {p} | {decision} | {adjusted} |")
    return out


def refused_lines(rows: Sequence[dict], pairings: Sequence[Pairing],
                  where: str = "the plan names (a `cross-kind-pairings` block of ANALYSIS_PLAN.md)") -> list[str]:
    """The comparisons refused for pairing records of two machine kinds: each test, its mixed draws and the
    decision it would have had across kinds (context only); and which cross-kind pairings the plan names
    (``where``: whose and where)."""
    named = "; ".join(f"{', '.join(p.tests)}: {' / '.join(sorted(p.kinds))}" + (f" ({p.amendment})" if p.amendment
                                                                                   else "") for p in pairings)
    head = f"Cross-kind pairings {where}: " + (named or "none") + "."
    refused = [r for r in rows if r["status"] == REFUSED]
    if not refused:
        return [head, "", "No comparison pairs records of two machine kinds."]
    lines = [head, "", "Comparisons refused because a draw pairs an edited record and its reference computed on "
                       "different kinds of machine (edited / reference; a test is judged only when every draw "
                       "pairs one kind). The decision each would have had across kinds is context, not a verdict:",
             ""]
    for row in refused:
        t = row["test"]
        draws = "; ".join(f"draw {seed}: {a.label} / {b.label}" for seed, a, b in row["mixed"])
        context = "" if t.rule == "context" else (
            f" Across kinds: {row['across'].get('decision') or '—'} (adjusted: {row['across'].get('holm') or '—'}).")
        lines.append(f"- {t.id} ({t.title}, {row['task']}): mixes machine kinds: {draws}.{context}")
    return lines


def margin_note(rows: Sequence[dict]) -> list[str]:
    """The tests whose decision lies within its Monte Carlo error of alpha (``at the margin``), if any."""
    at = [r["test"].id for r in rows if AT_MARGIN in (r.get("decision"), r.get("holm"))]
    return [f"At the margin (a decision another bootstrap seed could change): {', '.join(at)}."] if at else []


def _code(provenance: Mapping[str, Any] | None) -> str:
    """A record's code: mathneuro's git commit (``+dirty`` with uncommitted changes), else its version."""
    if not provenance:
        return "not recorded"
    git = provenance.get("git") or {}
    if git.get("commit"):
        return f"{str(git['commit'])[:10]}{'+dirty' if git.get('dirty') else ''}"
    return f"mathneuro {provenance.get('version') or '?'} (no git checkout)"


def _uses(tree: Mapping[str, Sequence[Packed]], of_point: Callable[[Packed], str],
          of_task: Callable[[Packed, str], str]) -> dict[str, list[str]]:
    """``{value: [what]}``: each point's ``of_point(packed)``, each unedited task's ``of_task(packed, task)``."""
    uses: dict[str, list[str]] = {}
    for study, packs in sorted(tree.items()):
        for packed in packs:
            if packed.kind == "point":
                uses.setdefault(of_point(packed), []).append(f"{study}/{packed.name}")
            elif packed.kind == "baseline":
                for task in packed.header.get("tasks") or []:
                    uses.setdefault(of_task(packed, task), []).append(f"unedited {task}")
    return uses


def _uses_line(title: str, uses: Mapping[str, list[str]]) -> str:
    if not uses:
        return f"{title}: no records yet."
    parts = []
    for value, what in sorted(uses.items()):
        shown = sorted(set(what))
        parts.append(f"{value}: {len(shown)} record(s) ({', '.join(shown[:6])}{', …' if len(shown) > 6 else ''})")
    return f"{title}: " + "; ".join(parts) + "."


def _with_dtype(label: str, hardware: Mapping[str, Any] | None) -> str:
    return label if not hardware else f"{label}, {hardware.get('dtype') or '?'}"


def hardware_line(tree: Mapping[str, Sequence[Packed]]) -> str:
    """Where the records were computed: each kind of machine (:func:`~mathneuro.report.machines.kind_key`, with
    "noted, not recorded" where it was noted after the run) and dtype, with the points and unedited tasks it
    computed. A point evaluated in several runs counts under each run's machine."""
    def of_point(packed: Packed) -> list[str]:
        runs = packed.header.get("runs") or [packed.header]
        return sorted({_with_dtype(machine_of(r.get("hardware")).label, r.get("hardware")) for r in runs})

    uses: dict[str, list[str]] = {}
    for value, what in _uses(tree, lambda p: "\n".join(of_point(p)), lambda p, task: _with_dtype(
            task_machine(p, task).label, (p.header.get("task_hardware") or {}).get(task) or p.header.get("hardware")
    )).items():
        for one in value.split("\n"):
            uses.setdefault(one, []).extend(what)
    return _uses_line("Machines the records were computed on (kind: name and CPU kernel flags; a comparison "
                      "pairs one kind unless the plan names the pairing)", uses)


def code_line(tree: Mapping[str, Sequence[Packed]]) -> str:
    """Which code computed the records: mathneuro's git commit of each point and unedited task (its
    ``provenance``), so that every number in the table can be traced to the code that made it."""
    uses = _uses(tree, lambda p: _code(p.header.get("provenance")),
                 lambda p, task: _code((p.header.get("task_provenance") or {}).get(task)))
    return _uses_line("Code the records were computed with (mathneuro's git commit)", uses)
