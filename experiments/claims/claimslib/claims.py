"""Claims judged from committed per-example records under a stated plan (experiments/ANALYSIS_PLAN.md).

A :class:`Test` names the edited points of a study (by their point fields, every draw), the reference
each is paired with in its own draw (the unedited ``baseline``, ``random``, ``random(wanda)`` or
``random_neurons``), the task and metric, and a rule:

- ``direction``: the 95 % interval of edited - reference excludes 0 (supports: ``expect`` side);
- ``equivalence``: two one-sided tests within +-``margin`` (the 90 % interval); for a pair metric
  (``[loglikelihood, words]``) on the log ratio of word perplexities;
- ``gain``: supports when higher; contradicts when the 95 % interval lies below
  ``factor x reference accuracy`` (the smallest gain a claim states);
- ``threshold``: edited - reference against ``t = factor x (reference accuracy - chance)``;
- ``proportion``: the edited point's own accuracy against ``t = factor x reference accuracy``
  (Wilson's interval as the floor of the bootstrap's);
- ``context``: numbers only.

:func:`evaluate` computes every test (hierarchical bootstrap over draws and examples,
:mod:`mathneuro.report.inference`), Holm-adjusts each family's contradicting p-values (and the
supporting ones of secondary families: a primary part is an intersection-union test), and :func:`part_status` /
:func:`claim_verdict` turn decisions into verdicts.

Two more rules keep a verdict from resting on what the data cannot carry:

- **One kind of machine per comparison.** Each draw's edited record and its reference must come from one
  kind of machine (:func:`mathneuro.report.machines.kind_key`, per task), unless the plan names the pairing
  (``pairings``). A test with a mixed draw is **refused** (status :data:`REFUSED`, no decision, p = 1 in its
  Holm family); its numbers and the decision it would have had are kept under ``across`` as context.
- **Decisions that do not hinge on the bootstrap's seed.** Each p-value carries its Monte Carlo range
  (:mod:`claimslib.mcerror`); a decision that the range's two ends would make differently reads
  :data:`AT_MARGIN`, not decided, and so does a Holm decision. Interval ends carry their Monte Carlo errors.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from statistics import NormalDist
from typing import Any

import numpy as np

from claimslib.mcerror import McEnd, count_interval, end_error, proportion_end_error
from claimslib.records import Packed
from mathneuro.report import inference as inf
from mathneuro.report.machines import Pairing, allowed, task_machine
from mathneuro.report.references import facts_of, reference_name
from mathneuro.results.schema import PAIRING_FIELDS

RULES = ("direction", "equivalence", "gain", "threshold", "proportion", "context")
SUPPORTS, CONTRADICTS, UNDECIDED = "supports", "contradicts", "inconclusive"
NOT_RUN = "not run"
AT_MARGIN = "at the margin"  # the decision's p-value lies within its Monte Carlo error of alpha
REFUSED = "refused: mixes machine kinds"  # a draw pairs records of two kinds the plan does not pair
PART_REFUSED, CLAIM_REFUSED = "refused (mixes machine kinds)", "not judged: mixes machine kinds"
#: Point fields an edited point and its random reference share (the seed too).
MATCH = (*PAIRING_FIELDS, "seed")
_NORMAL = NormalDist()


@dataclass(frozen=True)
class Test:
    """One comparison of the plan (see the module docstring for ``rule``)."""

    id: str
    group: str  # e.g. "1a": the plan's test label, shared by its conditions
    claim: str
    part: str
    title: str
    study: str
    select: tuple[tuple[str, Any], ...]
    reference: str
    tasks: tuple[str, ...]
    metric: str
    rule: str
    expect: str = "lower"
    margin: float | None = None
    factor: float = 0.0
    chance: float = 0.0
    family: str | None = None
    role: str = "primary"  # primary | secondary | context
    min_n: int = 1
    can_contradict: bool = True  # False: the plan declared this test unable to contradict at its size


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool):
        return math.isclose(float(a), float(b), rel_tol=1e-9, abs_tol=1e-12)
    return a == b


def _reference_name(packed: Packed) -> str | None:
    """The name the packed point goes by as a random reference (``random``, ``random(wanda)``...), None for
    an edited point: the report's naming, from the method's recorded facts."""
    return reference_name(packed.point, facts_of({"point": packed.point,
                                                  "method_facts": packed.header.get("method_facts")}))


def edited_points(test: Test, study: Sequence[Packed]) -> list[Packed]:
    """The test's edited points (kind ``point``, every ``select`` field equal), one per draw, by seed."""
    out = []
    for packed in study:
        point = packed.point
        if packed.kind != "point" or not all(_same(point.get(k), v) for k, v in test.select):
            continue
        own = _reference_name(packed)
        if "reference" not in dict(test.select) and own is not None and "(" in own:  # sized by another method
            continue
        out.append(packed)
    seeds = [p.point.get("seed") for p in out]
    if len(set(map(str, seeds))) != len(seeds):
        raise ValueError(f"test {test.id}: two records of one draw ({sorted(map(str, seeds))}); pack one run per point")
    return sorted(out, key=lambda p: int(p.point.get("seed") or 0))


def reference_of(test: Test, edited: Packed, study: Sequence[Packed]) -> Packed | None:
    """The reference ``edited`` is paired with in its own draw."""
    if test.reference == "baseline":
        name = edited.header.get("baseline")
        return next((p for p in study if p.kind == "baseline" and p.name == name), None)
    for packed in study:
        if packed.kind != "point" or _reference_name(packed) != test.reference:
            continue
        if all(_same(packed.point.get(f), edited.point.get(f)) for f in MATCH):
            return packed
    return None


def _values(records: Mapping[Any, Mapping[str, Any]], metric: str) -> tuple[dict, dict | None]:
    """``({key: value}, {key: count} or None)``; a pair metric gives (-loglikelihood, count)."""
    values, counts = {}, {}
    for key, rec in records.items():
        value = rec.get(metric)
        if isinstance(value, list):
            values[key], counts[key] = -float(value[0]), float(value[1])
        elif value is not None:
            values[key] = float(value)
    return values, (counts or None)


def _empty(test: Test, status: str, **extra: Any) -> dict:
    return {"test": test, "status": status, "decision": None, "holm": None, **extra}


def evaluate_test(test: Test, tree: Mapping[str, Sequence[Packed]], *, resamples: int = 10_000,
                  alpha: float = inf.ALPHA, seed: int = 0, pairings: Sequence[Pairing] = ()) -> dict:
    """One test's numbers and unadjusted decision (``status`` "ok", :data:`REFUSED`, "not run" or "not
    judged: ..."). ``seed``: the bootstrap's (0: the table's); ``pairings``: the cross-kind pairings the plan names."""
    study = tree.get(test.study) or []
    mine, theirs, counts, task, machines = [], [], None, None, []
    for point in edited_points(test, study):
        ref = reference_of(test, point, study)
        task = next((t for t in test.tasks if t in point.examples), None)
        if ref is None or task is None or ref.task(task) is None:
            continue
        (a, ca), (b, _) = _values(point.task(task), test.metric), _values(ref.task(task), test.metric)
        if ca is not None:
            counts = ca if counts is None else {k: v for k, v in counts.items() if k in ca}
        mine.append(a)
        theirs.append(b)
        machines.append((point.point.get("seed"), task_machine(point, task), task_machine(ref, task)))
    if not mine or not any(mine):
        return _empty(test, NOT_RUN)
    E, R, keys = inf.paired_arrays(mine, theirs)
    D, n = E.shape
    if D < 2:
        return _empty(test, "not judged: one draw", draws=D, n=n)
    if n < test.min_n:
        return _empty(test, f"not judged: n = {n} below the plan's {test.min_n}", draws=D, n=n)
    den = None if counts is None else np.broadcast_to(np.array([counts[k] for k in keys]), E.shape)
    ref_mean = float(R.mean()) if den is None else float("nan")
    row: dict[str, Any] = {"test": test, "status": "ok", "task": task, "draws": D, "n": n, "ref_mean": ref_mean,
                           "edited_mean": float(E.mean()) if den is None else float("nan"),
                           "draw_diffs": (E - R).sum(axis=1) / (n if den is None else den.sum(axis=1)),
                           "changed_up": int(np.sum(E > R)), "changed_down": int(np.sum(E < R)),
                           "threshold": None, "decision": None, "holm": None, "p_support": None, "p_contra": None,
                           "machines": machines, "resamples": resamples}
    _numbers(test, row, E, R, den, ref_mean, resamples, [seed, zlib.crc32(test.id.encode())], alpha)
    mixed = [(s, a, b) for s, a, b in machines if not allowed(pairings, test.group, a, b)]
    if mixed:
        row.update(status=REFUSED, mixed=mixed, across={"decision": row["decision"]}, decision=None)
    return row


def _numbers(test: Test, row: dict, E: np.ndarray, R: np.ndarray, den: np.ndarray | None, ref_mean: float,
             resamples: int, seed: list[int], alpha: float) -> None:
    """Fill ``row``: estimate, intervals with their Monte Carlo errors, p-values with their ranges, decision."""
    if test.rule == "proportion":
        row.update(_proportion(test, E, ref_mean, resamples, seed))
    else:
        tests = inf.paired_tests(E, R, resamples=resamples, seed=seed, denominators=den)
        row["estimate"] = tests.estimate
        row["ci95"], row["ci90"] = tests.interval(0.95)[:2], tests.interval(1 - 2 * alpha)[:2]
        row["mc95"], row["mc90"] = end_error(tests, 0.95), end_error(tests, 1 - 2 * alpha)
        row.update(_rule_pvalues(test, tests, ref_mean))
        ends = [_rule_pvalues(test, McEnd(tests, end), ref_mean) for end in (0, 1)]  # type: ignore[arg-type]
        row["p_range"] = [(e["p_support"], e["p_contra"]) for e in ends] if ends[0] else None
    if test.rule != "context":
        if not test.can_contradict:
            row["p_contra"] = 1.0
            row["p_range"] = [(ps, 1.0) for ps, _ in row["p_range"]]
        row["decision"] = _decide_mc(row["p_support"], row["p_contra"], row["p_range"], alpha)


def _rule_pvalues(test: Test, tests: inf.Tests, ref_mean: float) -> dict:
    """``p_support`` / ``p_contra`` on the two-sided alpha scale (the 95 % interval; 90 % for equivalence)."""
    est = tests.estimate
    if test.rule == "context":
        return {}
    if test.rule == "equivalence":
        p_eq, p_ne = tests.equivalence(float(test.margin))
        return {"p_support": p_eq, "p_contra": p_ne}
    if test.rule in ("direction", "gain"):
        p = tests.difference()
        up = est > 0 if test.expect == "higher" else est < 0
        out = {"p_support": p if up else 1.0, "p_contra": 1.0 if up else p}
        if test.rule == "gain":
            t = test.factor * ref_mean
            out.update(threshold=t, p_contra=min(1.0, 2 * tests.less(t)))
        return out
    if test.rule == "threshold":
        t = test.factor * (ref_mean - test.chance)
        return {"threshold": t, "p_support": min(1.0, 2 * tests.less(t)), "p_contra": min(1.0, 2 * tests.greater(t))}
    raise ValueError(f"test {test.id}: unknown rule {test.rule!r}; allowed: {', '.join(RULES)}")


def _proportion(test: Test, E: np.ndarray, ref_mean: float, resamples: int, seed: list[int]) -> dict:
    """The edited point's own accuracy against ``t = factor x ref_mean``: bootstrap over draws and
    examples with Wilson's score interval (on the draw-averaged proportion, n examples) as its floor."""
    n = E.shape[1]
    p_hat, t = float(E.mean()), test.factor * ref_mean
    stats = inf.hierarchical_bootstrap(E, resamples=resamples, seed=seed)
    z = _NORMAL.inv_cdf(0.975)
    lo, hi = inf.percentile_interval(stats, 0.95)
    wl, wh = inf.wilson_interval(p_hat * n, n, z)
    out = {"estimate": p_hat, "ci95": (min(lo, float(wl)), max(hi, float(wh))), "ci90": None, "threshold": t,
           "mc95": proportion_end_error(stats, 0.95, (float(wl), float(wh)))}
    if not 0 < t < 1:
        return {**out, "p_support": 1.0, "p_contra": 1.0, "p_range": [(1.0, 1.0)] * 2}
    score = (p_hat - t) / math.sqrt(t * (1 - t) / n)
    fixed_below, fixed_above = _NORMAL.cdf(score), 1 - _NORMAL.cdf(score)  # evidence that it is below / above t
    below_mc = count_interval(int(np.count_nonzero(stats >= t)), resamples)
    above_mc = count_interval(int(np.count_nonzero(stats <= t)), resamples)
    below = max(float(np.mean(stats >= t)), fixed_below)
    above = max(float(np.mean(stats <= t)), fixed_above)
    ranges = [(min(1.0, 2 * max(below_mc[e], fixed_below)), min(1.0, 2 * max(above_mc[e], fixed_above)))
              for e in (0, 1)]
    return {**out, "p_support": min(1.0, 2 * below), "p_contra": min(1.0, 2 * above), "p_range": ranges}


def _decide(p_support: float, p_contra: float, alpha: float) -> str:
    if p_support <= alpha:
        return SUPPORTS
    return CONTRADICTS if p_contra <= alpha else UNDECIDED


def _decide_mc(p_support: float, p_contra: float, p_range: Sequence[tuple[float, float]] | None, alpha: float) -> str:
    """The decision, or :data:`AT_MARGIN` where the Monte Carlo range's two ends decide differently."""
    decision = _decide(p_support, p_contra, alpha)
    if p_range and len({_decide(ps, pc, alpha) for ps, pc in p_range}) > 1:
        return AT_MARGIN
    return decision


def evaluate(tests: Iterable[Test], tree: Mapping[str, Sequence[Packed]], *, resamples: int = 10_000,
             alpha: float = inf.ALPHA, seed: int = 0, pairings: Sequence[Pairing] = ()) -> list[dict]:
    """Every test's row, with ``holm``: the family-adjusted decision (None outside families).

    A part of a claim is supported only if every one of its primary tests supports it: an
    intersection-union test, valid without adjustment (Berger 1982), so the supporting p-values of
    primary tests are used as they are. The contradicting p-values are Holm-adjusted within each family
    (any one test contradicting suffices), and secondary families are Holm-adjusted on both sides."""
    rows = [evaluate_test(t, tree, resamples=resamples, alpha=alpha, seed=seed, pairings=pairings) for t in tests]
    return adjust_families(rows, alpha)


def _holm_decisions(members: Sequence[dict], p: Sequence[tuple[float, float]], alpha: float) -> list[str]:
    sup, con = inf.holm([ps for ps, _ in p]), inf.holm([pc for _, pc in p])
    return [_decide(float(ps if r["test"].role != "primary" else raw[0]), float(pc), alpha)
            for r, raw, ps, pc in zip(members, p, sup, con, strict=True)]


def adjust_families(rows: list[dict], alpha: float = inf.ALPHA) -> list[dict]:
    """Set each family member's ``holm`` decision (see :func:`evaluate`); returns ``rows``. A refused test
    (:data:`REFUSED`) stays in its family with p = 1 on both sides (the family keeps its planned size) and gets
    no decision; ``across["holm"]`` is the decision it would have had, every test taken as computed. A Holm
    decision that the p-values' Monte Carlo ranges (``p_range``) would make differently is :data:`AT_MARGIN`."""
    families: dict[str, list[dict]] = {}
    for row in rows:
        if row["status"] in ("ok", REFUSED) and row["test"].family and row["test"].rule != "context":
            families.setdefault(row["test"].family, []).append(row)
    for members in families.values():
        def ps(r: dict, end: int | None, refuse: bool) -> tuple[float, float]:
            if refuse and r["status"] == REFUSED:
                return 1.0, 1.0
            return (r["p_support"], r["p_contra"]) if end is None or not r.get("p_range") else r["p_range"][end]

        for refuse in (True, False):
            decided = [_holm_decisions(members, [ps(r, end, refuse) for r in members], alpha) for end in (None, 0, 1)]
            for row, now, low, high in zip(members, *decided, strict=True):
                holm = now if low == high else AT_MARGIN
                if refuse:
                    row["holm"] = None if row["status"] == REFUSED else holm
                elif row["status"] == REFUSED:
                    row["across"]["holm"] = holm
    return rows


def part_status(rows: Iterable[dict], *, adjusted: bool = True, across: bool = False) -> str:
    """A part of a claim from its primary tests' decisions: supported / contradicted / inconclusive,
    ``not run`` when none has records, ``incomplete`` when some lack them or cannot be judged yet (one
    draw so far), and none contradicts; :data:`AT_MARGIN` where a decision is; ``refused (mixes machine
    kinds)`` where a test is refused. ``across``: refused tests count with the decision they would have had."""
    rows = [r for r in rows if r["test"].role == "primary"]
    key = "holm" if adjusted else "decision"

    def decision(r: dict) -> str | None:
        if r["status"] == REFUSED:
            return r["across"].get(key) if across else REFUSED
        return r.get(key) if r["status"] == "ok" else None

    decisions = [decision(r) for r in rows]
    if CONTRADICTS in decisions:
        return "contradicted"
    if all(d is None for d in decisions):
        return NOT_RUN if all(r["status"] == NOT_RUN for r in rows) else "incomplete"
    if None in decisions:
        return "incomplete"
    if REFUSED in decisions:
        return PART_REFUSED
    if AT_MARGIN in decisions:
        return AT_MARGIN
    return "supported" if all(d == SUPPORTS for d in decisions) else UNDECIDED


def claim_verdict(statuses: Sequence[str]) -> str:
    """A claim from its parts: reproduced / not reproduced / inconclusive / not run / incomplete, or
    :data:`CLAIM_REFUSED` (a part refused for mixing machine kinds) and :data:`AT_MARGIN` (a part at the
    margin), each only where no part is contradicted."""
    if "contradicted" in statuses:
        return "not reproduced"
    if all(s == NOT_RUN for s in statuses):
        return NOT_RUN
    if any(s in (NOT_RUN, "incomplete") for s in statuses):
        return "incomplete"
    if PART_REFUSED in statuses:
        return CLAIM_REFUSED
    if AT_MARGIN in statuses:
        return AT_MARGIN
    return "reproduced" if all(s == "supported" for s in statuses) else UNDECIDED
