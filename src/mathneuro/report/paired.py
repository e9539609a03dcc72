"""Paired comparisons of sweep points on the same evaluation examples, with bootstrap intervals.

Two scores of 0.42 and 0.38 on 50 questions say little; the same 50 questions answered by the
edited and the unedited model say much more, because most questions are answered alike by both.
With per-example records (``eval.log_samples=true``: ``<run dir>/samples/<task>.jsonl``, one
``{"doc_id": .., "<metric>": .., ...}`` per line, and the unedited model's records in
``results["samples"]["baseline_dir"]``) every edited point is compared with

- ``baseline``: the unedited model on the same examples, and
- ``random``: the ``random`` point of the same model, identification task, filter, intervention,
  scale factor, top-K, N and seed (MathNeuro's count of weights per matrix, drawn at random),
- ``random(<method>)``: for a method ``X``, the ``random`` point with ``method.reference=X`` of the same
  fields (X's own count per matrix: Wanda's reference at its own size), and, for ``lape``,
- ``random_neurons``: the ``random_neurons`` point of the same fields (as many MLP neurons per layer
  as LAPE zeroes, drawn at random: LAPE's reference at its own size),

per evaluated task and metric, on the doc_ids both records share.

The statistic (a point's repeats pooled): for each seed s, d_s(i) = edited_s(i) - reference_s(i)
on example i; ``diff`` = mean over seeds of the per-seed mean differences. Examples are taken
common to every seed and both sides, so this is the mean over examples of the seed-averaged
d(i). The 95 % interval is a percentile bootstrap that resamples *examples* (with replacement);
one draw of example indices is applied to every seed, because the seeds were evaluated on the
same examples and an example's difficulty is shared across them. Seeds are not resampled: the
interval is about the evaluation sample, given these identification draws. With one seed this is
the ordinary paired bootstrap. Resampling is seeded per row (same inputs, same interval) and
vectorised with numpy.

Each row also carries :data:`mathneuro.report.inference.INFERENCE_COLUMNS`: an interval that resamples
the identification draws too (``ci95_*``, ``ci90_*``; for 0/1 metrics widened to Newcombe's interval,
or the rule of three when nothing changed), the examples changed each way, and, with ``margin`` and
``families``, equivalence verdicts and Holm-adjusted decisions (see :mod:`mathneuro.report.inference`).
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from mathneuro.report.identity import PREFIX, identity_fields, mark_identities
from mathneuro.report.inference import (
    DEFAULT_RESAMPLES,
    INFERENCE_COLUMNS,
    VERDICT_RULE,
    apply_holm,
    inference_columns,
    markdown_cells,
    paired_arrays,
    paired_bootstrap,
)
from mathneuro.report.machines import machines_differ
from mathneuro.report.not_made import (
    MACHINES_DIFFER,
    NO_BASELINE,
    NO_RECORDS,
    NO_REFERENCE,
    NO_RESULTS,
    NO_SHARED,
    NOT_ASKED,
    PROMPTS_DIFFER,
    NotMade,
)
from mathneuro.report.point_records import PointRecords, point_records
from mathneuro.report.prompt_check import prompt_clash
from mathneuro.report.references import (
    facts_of,
    missing_own_size_references,
    reference_name,
    serves,
)
from mathneuro.report.sweep import load_results
from mathneuro.report.tables import write_csv
from mathneuro.results.schema import PAIRING_FIELDS

COLUMNS = ("method", "reference", "task", "metric", "top_k", "scalar", "seeds", "n_examples", "diff",
           "ci_low", "ci_high")
EXTRA_COLUMNS = ("side", "model", "filter", "intervention", "num_samples", *INFERENCE_COLUMNS)
#: Point fields that must agree between an edited point and its ``random`` reference (seed too).
MATCH_FIELDS = PAIRING_FIELDS
BASELINE = "baseline"


# ------------------------------------------------------------------------------------- statistics
def paired_differences(edited: Sequence[Mapping[int, float]], reference: Sequence[Mapping[int, float]]
                       ) -> tuple[np.ndarray, list[int]]:
    """``([seeds, n] differences, doc_ids)`` of per-seed ``{doc_id: value}`` records on the doc_ids
    common to every seed and both sides (sorted)."""
    mine, theirs, docs = paired_arrays(edited, reference)
    return mine - theirs, docs


# ------------------------------------------------------------------------------------------ pairing
@dataclass
class PairedReport:
    """Rows of ``paired.csv`` plus one line per point or comparison that could not be made."""

    rows: list[dict]
    notes: list[str]


def _job(result: Mapping) -> str:
    return str(result.get("_job") or result.get("_dir") or (result.get("point") or {}).get("method", "?"))


def _key(value: Any) -> Any:
    return json.dumps(value, sort_keys=True, default=str) if isinstance(value, (dict, list)) else value


def _group_key(point: Mapping, fields: Sequence[str]) -> tuple:
    return tuple(_key(point.get(f)) for f in fields)


def _sort_value(value: Any) -> tuple:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return (0, float(value), "")
    return (1, 0.0, "" if value is None else str(value))


def _rng_seed(seed: int, key: Iterable[Any]) -> list[int]:
    return [int(seed), zlib.crc32(json.dumps([str(k) for k in key]).encode())]


def _load_sources(sources: Any) -> tuple[list[dict], list[str]]:
    """Complete results (with ``_dir``) from a sweep dir, run dirs, or results mappings."""
    if isinstance(sources, (str, Path, Mapping)):
        sources = [sources]
    results: list[dict] = []
    notes: list[str] = []
    for item in sources:
        if isinstance(item, Mapping):
            results.append(dict(item))
            continue
        complete, _missing = load_results(item)
        if not complete:
            notes.append(NotMade(NO_RESULTS, f"{item}: no complete results.json; nothing to pair"))
        for result in complete:
            if result.get("_job") == ".":  # a run dir given directly: name it by its path
                result["_job"] = str(item)
        results.extend(complete)
    return results, notes


def _with_records(results: list[dict], notes: list) -> list[tuple[Mapping, PointRecords]]:
    """The ``results`` with per-example records, each with its records; a note for each of the others (or one
    note when none has any)."""
    with_records: list[tuple[Mapping, PointRecords]] = []
    without: list[Mapping] = []
    for result in results:
        recs = point_records(result)
        if recs is None:
            without.append(result)
        else:
            with_records.append((result, recs))
    if not with_records:
        if results:
            notes.append(NotMade(NOT_ASKED, f"no per-example records in any of {len(results)} point(s) (run with "
                                            "eval.log_samples=true); "
                                 "no paired comparisons"))
        return []
    for result in without:
        notes.append(NotMade(NO_RECORDS, f"{_job(result)}: no per-example records (eval.log_samples=false?); "
                                         "skipped in paired.csv"))
    return with_records


@dataclass
class _Points:
    """The points with records: grouped by every field but the seed, and the random references by name."""

    group_fields: tuple[str, ...]
    match_fields: tuple[str, ...]
    groups: dict[tuple, list[tuple[Mapping, PointRecords]]] = field(default_factory=dict)
    randoms: dict[str, dict[tuple, PointRecords]] = field(default_factory=dict)  # name -> points by match key and seed
    facts: dict[str, dict] = field(default_factory=dict)  # reference name or method -> its method's facts


def _index(with_records: list[tuple[Mapping, PointRecords]]) -> _Points:
    """:class:`_Points` of ``with_records``: points that differ in a config key stay in different groups."""
    split = mark_identities([r for r, _ in with_records], ("method", "reference", *MATCH_FIELDS))
    points = _Points(("method", "reference", *MATCH_FIELDS, *split),
                     (*MATCH_FIELDS, *(f for f in split if not f.startswith(f"{PREFIX}method.")), "seed"))
    for result, recs in with_records:
        point = result.get("point") or {}
        points.groups.setdefault(_group_key(point, points.group_fields), []).append((result, recs))
        own = facts_of(result)
        points.facts.setdefault(str(point.get("method")), own)
        name = reference_name(point, own)
        if name is not None:
            points.facts.setdefault(name, own)
            points.randoms.setdefault(name, {})[_group_key(point, points.match_fields)] = recs
    return points


def _baseline_pairs(members: list[tuple[Mapping, PointRecords]], label: str,
                    notes: list) -> list[tuple[PointRecords, None]]:
    """Every seed of ``members`` whose unedited model's records are there, to compare with them; a note for
    the seeds that name none or whose records are gone."""
    pairs = [(recs, None) for _, recs in members if recs.baseline_dir is not None and recs.baseline_dir.is_dir()]
    unnamed = sum(1 for _, recs in members if recs.baseline_dir is None)
    if unnamed:
        notes.append(NotMade(NO_BASELINE,
                             f"{label}: {unnamed} seed(s) name no baseline_dir; not compared with the baseline"))
    gone = [recs.baseline_dir for _, recs in members
            if recs.baseline_dir is not None and not recs.baseline_dir.is_dir()]
    if gone:
        notes.append(NotMade(NO_BASELINE, f"{label}: the unedited model's records of {len(gone)} seed(s) are gone "
                     f"from {gone[0]} (a sweep "
                     "written by mathneuro 0.1 kept them in the cache: cleared, or the folder moved); not compared "
                     "with the baseline"))
    return pairs


def _group_rows(members: list[tuple[Mapping, PointRecords]], points: _Points, compare: Callable[..., list[dict]],
                notes: list) -> list[dict]:
    """Rows of one group (its seeds in ``members``) against the baseline and, for an edited point, each random
    reference that serves its method."""
    point = dict(members[0][0].get("point") or {})
    label = " ".join(f"{f}={point.get(f)}" for f in points.group_fields if f != "reference" or point.get(f))
    own_name = reference_name(point, points.facts.get(str(point.get("method"))))
    if own_name is not None:
        point["method"] = own_name  # random(wanda) apart from random in the rows
    rows = compare(point, BASELINE, _baseline_pairs(members, label, notes), label=label)
    if own_name is not None:
        return rows
    for name in sorted(points.randoms, key=lambda n: ("(" in n, n)):  # random, random_neurons, then random(X)
        if not serves(name, point.get("method"), points.facts[name]):
            continue
        pairs_rand = []
        for result, recs in members:
            ref = points.randoms[name].get(_group_key(result.get("point") or {}, points.match_fields))
            if ref is not None:
                pairs_rand.append((recs, ref))
        if not pairs_rand:
            if points.randoms[name]:
                notes.append(NotMade(NO_REFERENCE, f"{label}: no {name} point with per-example records at the same "
                             f"top-K, seed and filter; not compared with {name}"))
            continue
        rows += compare(point, name, pairs_rand, label=label)
    return rows


def paired_report(sources: Any, *, resamples: int = DEFAULT_RESAMPLES, confidence: float = 0.95,
                  seed: int = 0, margin: float | None = None, families: Sequence[str] = ()) -> PairedReport:
    """Every edited point against the unedited baseline and its random reference(s): ``random``,
    ``random(X)`` (``random`` sized by method X) for X, and ``random_neurons`` for ``lape``.

    ``sources``: a sweep directory, a list of run/sweep directories, or results mappings (as
    :func:`mathneuro.report.load_results` returns them, with ``_dir``). Seeds of the same point are
    pooled (see the module docstring). Points without per-example records get one note each.
    ``margin``: equivalence verdicts within +-margin; ``families``: Holm-adjusted decisions per family
    (:func:`mathneuro.report.inference.parse_family`; see :mod:`mathneuro.report.inference`)."""
    results, notes = _load_sources(sources)
    with_records = _with_records(results, notes)
    if not with_records:
        return PairedReport([], notes)
    points = _index(with_records)
    compare = partial(_compare, resamples=resamples, confidence=confidence, seed=seed, notes=notes, margin=margin)
    rows: list[dict] = []
    for gkey in sorted(points.groups, key=lambda k: tuple(_sort_value(v) for v in k)):
        members = sorted(points.groups[gkey], key=lambda m: _sort_value((m[0].get("point") or {}).get("seed")))
        rows += _group_rows(members, points, compare, notes)
    if not points.randoms:
        notes.append(NotMade(NO_REFERENCE, "no random points with per-example records: "
                                           "edited points are compared with the baseline only"))
    notes += [NotMade(NO_REFERENCE, n) for n in missing_own_size_references(points.groups, points.randoms,
                                                                            points.facts)]
    return PairedReport(apply_holm(rows, families), notes)


def paired_comparisons(sources: Any, *, resamples: int = DEFAULT_RESAMPLES, confidence: float = 0.95,
                       seed: int = 0, margin: float | None = None, families: Sequence[str] = ()) -> list[dict]:
    """The rows of ``paired.csv`` (see :func:`paired_report`; its notes are dropped here)."""
    return paired_report(sources, resamples=resamples, confidence=confidence, seed=seed, margin=margin,
                         families=families).rows


def _compare(point: Mapping, reference: str, pairs: list[tuple[PointRecords, PointRecords | None]],
             resamples: int, confidence: float, seed: int, notes: list[str], label: str,
             margin: float | None = None) -> list[dict]:
    """Rows for one edited point (its seeds in ``pairs``) against one reference, per task and metric."""
    if not pairs:
        return []
    rows = []
    tasks: dict[str, str] = {}
    for recs, _ in pairs:
        for task, side in recs.tasks.items():
            tasks.setdefault(task, side)
    for task in sorted(tasks):
        edited, refs = [], []
        for recs, ref in pairs:
            mine = recs.task(task)
            theirs = recs.task(task, baseline=True) if ref is None else ref.task(task)
            if mine is None or theirs is None:
                continue
            clash = prompt_clash(task, recs.path(task),
                                 recs.path(task, baseline=True) if ref is None else ref.path(task),
                                 _job(recs.result), "the unedited model" if ref is None else _job(ref.result))
            kinds = machines_differ(recs.result, None if ref is None else ref.result)
            if clash or kinds:  # never pair different prompts or machines: the task against this reference is refused
                notes.append(NotMade(PROMPTS_DIFFER, clash) if clash else NotMade(MACHINES_DIFFER, (
                    f"task {task}: refused to pair {_job(recs.result)} (computed on {kinds[0]}) with "
                    f"{'the unedited model' if ref is None else _job(ref.result)} (computed on {kinds[1]})")))
                edited = None
                break
            edited.append(mine)
            refs.append(theirs)
        if not edited:
            if edited is not None:
                notes.append(NotMade(NO_RECORDS, f"{label}: no {reference} records of task {task}; not compared"))
            continue
        metrics = sorted({m for recs in edited + refs for doc in recs.values() for m in doc})
        for metric in metrics:
            a = [{d: v[metric] for d, v in recs.items() if metric in v} for recs in edited]
            b = [{d: v[metric] for d, v in recs.items() if metric in v} for recs in refs]
            mine, theirs, docs = paired_arrays(a, b)
            if not docs:
                notes.append(NotMade(NO_SHARED, f"{label}: task {task} metric {metric}: "
                                                f"no doc_id common to the point and {reference}"))
                continue
            key = (reference, task, metric, *[point.get(f) for f in ("method", *MATCH_FIELDS)])
            diff, low, high = paired_bootstrap(mine - theirs, resamples=resamples, confidence=confidence,
                                               seed=_rng_seed(seed, key))
            rows.append({
                "method": point.get("method"), "reference": reference, "task": task, "metric": metric,
                "top_k": point.get("top_k"), "scalar": point.get("scalar"), "seeds": len(edited),
                "n_examples": len(docs), "diff": diff, "ci_low": low, "ci_high": high,
                "side": tasks[task], "model": point.get("model"), "filter": point.get("filter"),
                "intervention": point.get("intervention"), "num_samples": point.get("num_samples"),
                **{k: v for k, v in point.items() if k.startswith(PREFIX)},  # config keys that keep points apart
                **inference_columns(mine, theirs, margin=margin, confidence=confidence, resamples=resamples,
                                    seed=_rng_seed(seed, key)),
            })
    return rows


# ------------------------------------------------------------------------------------------- output
def paired_columns(rows: Sequence[Mapping]) -> list[str]:
    """:data:`COLUMNS`, :data:`EXTRA_COLUMNS`, then the ``config.<key>`` fields that keep points apart
    (:mod:`mathneuro.report.identity`)."""
    return [*COLUMNS, *EXTRA_COLUMNS, *identity_fields(rows)]


def write_paired_csv(rows: Sequence[Mapping], path: str | Path) -> Path:
    """``paired.csv``: :func:`paired_columns` (side, model, filter, ..., any ``config.<key>`` that differs)."""
    return write_csv(rows, path, paired_columns(rows))


def paired_markdown(report: PairedReport, *, confidence: float = 0.95) -> str:
    """The markdown section: one table row per comparison, the interval beside the difference,
    then the notes (skipped points, missing references)."""
    parts = [f"## Paired differences on the same examples (mean, {confidence:.0%} bootstrap intervals)\n"]
    rows = report.rows
    if rows:
        varying = [f for f in ("model", "filter", "intervention", "num_samples", *identity_fields(rows))
                   if len({_key(r.get(f)) for r in rows}) > 1]
        cols = ["method", *varying, "top_k", "scalar", "reference", "task", "metric", "seeds", "n_examples"]
        head = cols + list(markdown_cells(rows[0]))
        lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for r in rows:
            cells = [str(r.get(c)) for c in cols] + list(markdown_cells(r).values())
            lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
        parts.append("\n".join(lines) + "\n")
        parts.append(f"Verdict: {VERDICT_RULE}. Seeds are pooled per example (see `mathneuro.report.paired`); "
                     "changed = examples up / down (see `mathneuro.report.inference`).\n")
    if report.notes:
        parts.append("\n".join(f"- {n}" for n in report.notes) + "\n")
    return "\n".join(parts)


def write_paired(sources: Any, out_dir: str | Path, *, resamples: int = DEFAULT_RESAMPLES,
                 confidence: float = 0.95, seed: int = 0, margin: float | None = None,
                 families: Sequence[str] = ()) -> dict:
    """Compute the comparisons and write ``<out_dir>/paired.csv`` (when any row exists).

    Returns ``{"rows", "notes", "csv" (path or None), "markdown"}``, what the report embeds (the notes,
    comparisons not made and why, are listed apart, at the report's end)."""
    report = paired_report(sources, resamples=resamples, confidence=confidence, seed=seed, margin=margin,
                           families=families)
    path = write_paired_csv(report.rows, Path(out_dir) / "paired.csv") if report.rows else None
    return {"rows": report.rows, "notes": report.notes, "csv": str(path) if path else None,
            # notes: the report's end
            "markdown": paired_markdown(PairedReport(report.rows, []), confidence=confidence)}
