"""The claims table of experiments/README.md, rebuilt from the committed records (ANALYSIS_PLAN.md).

    .venv/bin/python experiments/claims/claims.py            # print the section
    .venv/bin/python experiments/claims/claims.py --write    # write it into the README (make claims)
    .venv/bin/python experiments/claims/claims.py --check    # exit 1 if the README differs

Reads only ``experiments/records/<study>/*.jsonl.gz`` (packed by experiments/claims/pack_records.py). Every
test below is one of ANALYSIS_PLAN.md §5, with its family (§6); the statistics are
:mod:`mathneuro.report.inference` and :mod:`claimslib.claims`. A claim whose records are
not committed yet says "not run".
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from claimslib.claims import (
    AT_MARGIN,
    NOT_RUN,
    Test,
    adjust_families,
    claim_verdict,
    evaluate,
    evaluate_test,
)
from claimslib.claims_table import (
    code_line,
    hardware_line,
    key_numbers,
    margin_note,
    refused_lines,
    test_rows,
    tested_claim,
)
from claimslib.confirm import (
    Amendment,
    claim1_line,
    claim4_line,
    claim5_line,
    claim6_line,
    confirm_tree,
    read_amendment,
    require_draws,
)
from claimslib.overlap_records import overlap_shares
from claimslib.records import Packed, read_tree

from mathneuro.report.machines import Pairing, parse_pairings

HERE = Path(__file__).resolve().parent
RECORDS, README, PLAN = HERE.parent / "records", HERE.parent / "README.md", HERE.parent / "ANALYSIS_PLAN.md"
BEGIN, END = "<!-- claims:begin -->", "<!-- claims:end -->"
RESAMPLES = 10_000
MODEL = "qwen2_5_coder_1_5b"
GSM8K, MMLU, RACE, MATH = ("gsm8k_cot",), ("mmlu",), ("race",), ("minerva_math",)
STRICT = "exact_match,strict-match"
#: Upstream parameter counts, tied embeddings counted once, and decoder blocks (ANALYSIS_PLAN.md §5.4).
UPSTREAM = {"qwen2_5_coder_1_5b": (1_543_714_304, 28), "qwen2_5_coder_0_5b": (494_032_768, 24)}
#: Examples per comparison under the amendment of 2026-12-06, by claim and task (records' task names:
#: the evaluation path's ``Harness.display_name``). Fewer common examples: "not judged (n below plan)".
SIZES = {
    "1": {"gsm8k_cot": 200, "mmlu": 1140, "race": 300},
    "2": {"gsm8k_cot": 100, "mmlu": 570, "race": 150},
    "3": {"gsm8k_cot": 300, "minerva_math": 154, "mmlu": 1140, "race": 300},
    "6": {"minerva_math": 105, "mathqa": 1000, "egsm": 100, "hellaswag": 500, "piqa": 1000, "winogrande": 1000,
          "mutual": 500, "wikitext": 15},
}
#: Claim 5's table: M's overlap over draws 0-2 at N = 1, 10, 100 (amendment of 2026-12-06; pack_amended.py).
AMENDED_TABLE = "amended_mmlu"
#: Claim 4's identifications are of both filters (§5.4): the confirmatory reading waits for every draw of each.
CLAIM4_FILTERS = ("mmlu", "race")
#: Test 1b: M's GSM8K accuracy below this share of the unedited accuracy (amendment of 2026-12-06).
T1B_FACTOR = 0.20
CLAIMS = (  # id, statement, parts (in order), margin text
    ("1", "Pruning M (K ≤ 15 %) drives GSM8K to about 0; RACE / MMLU drop about as much as random pruning",
     ("math", "non-math"), f"non-math ±0.05; 'about 0' = below {T1B_FACTOR:.2f} × unedited"),
    ("2", "Wanda pruning hurts math and non-math alike", ("math", "non-math"), "— (direction)"),
    ("2 (LAPE)", "LAPE is inconsistent", (), "—"),
    ("3", "Scaling M (K = 5 %, s = 1.1) raises GSM8K by 4–17 % and MATH by 5–35 % (relative), non-math unchanged",
     ("math", "non-math"), "non-math ±0.03; math: supported or inconclusive only at these sizes"),
    ("4", "M is about 1.5–1.8 % of all parameters (K = 15 %), spread fairly evenly over decoder blocks",
     ("share", "spread"), "share in [1.2, 2.1] %; blocks in [0.5, 2] × even"),
    ("5", "One sample finds most of M; overlap grows with N (70–80 % at 1, 95 %+ at 100)", ("overlap",),
     "≥ 0.65 at N = 1, ≥ 0.90 at N = 100"),
    ("6", "M found on GSM8K destroys MATH, MathQA, EGSM; leaves HellaSwag, PIQA, WinoGrande, WikiText, MuTual "
          "about as random pruning does", ("math", "non-math"), "non-math ±0.05 (WikiText ±10 % perplexity)"),
)
NOT_TESTABLE = {"2 (LAPE)": "'inconsistent' is across models and tasks; "
                            "one model family is run (ANALYSIS_PLAN.md §10); "
                            "LAPE is not run under the amendment of 2026-12-06"}


def _t(id_: str, group: str, claim: str, part: str, title: str, study: str, select: Mapping[str, Any],
       reference: str, tasks: Sequence[str], metric: str, rule: str, **kw: Any) -> Test:
    return Test(id=id_, group=group, claim=claim, part=part, title=title, study=study,
                select=tuple(sorted({"model": MODEL, **select}.items())), reference=reference, tasks=tuple(tasks),
                metric=metric, rule=rule, min_n=kw.pop("min_n", SIZES.get(claim[0], {}).get(tasks[0], 1)), **kw)


def plan_tests() -> list[Test]:
    """Every test of ANALYSIS_PLAN.md §5 as the amendment of 2026-12-06 has them."""
    tests: list[Test] = []
    sel = {"intervention": "prune", "top_k": 0.15, "filter": "mmlu"}
    c = "[K0.15 mmlu]"
    m = {**sel, "method": "mathneuro"}
    tests += [
        _t(f"1a{c}", "1a", "1", "math", "M − random, GSM8K", "prune", m, "random", GSM8K, STRICT, "direction",
           expect="lower", family="F1-math"),
        _t(f"1b{c}", "1b", "1", "math", f"M's GSM8K accuracy vs {T1B_FACTOR:.2f} × unedited", "prune", m, "baseline",
           GSM8K, STRICT, "proportion", factor=T1B_FACTOR, family="F1-math"),
        _t(f"1c{c}", "1c", "1", "non-math", "M − random, RACE-high", "prune", m, "random", RACE, "acc", "equivalence",
           margin=0.05, family="F1-nonmath"),
        _t(f"1d{c}", "1d", "1", "non-math", "M − random, MMLU", "prune", m, "random", MMLU, "acc", "equivalence",
           margin=0.05, family="F1-nonmath"),
    ]
    core = (("GSM8K", GSM8K, STRICT, "math"), ("RACE-high", RACE, "acc", "non-math"), ("MMLU", MMLU, "acc", "non-math"))
    for who in ("mathneuro", "random"):
        label = "M" if who == "mathneuro" else "random"
        for name, tasks, metric, _ in core:
            tests.append(_t(f"1ctx{c} {label} {name}", "1ctx", "1", "", f"{label} − unedited, {name}", "prune",
                            {**sel, "method": who}, "baseline", tasks, metric, "context", role="context"))
    for (name, tasks, metric, part), g in zip(core, "abc", strict=True):
        tests.append(_t(f"2{g} {name}", f"2{g}", "2", part, f"Wanda − unedited, {name}", "prune",
                        {**sel, "method": "wanda"}, "baseline", tasks, metric, "direction", expect="lower",
                        family="F2-wanda", min_n=SIZES["2"][tasks[0]]))
    tests += _scaling_tests()
    tests += _generalisation_tests()
    return tests


def _scaling_tests() -> list[Test]:
    m = {"intervention": "scale", "filter": "mmlu", "method": "mathneuro", "top_k": 0.05, "scalar": 1.1}
    math_tasks = (("GSM8K", GSM8K, STRICT, 0.04), ("MATH", MATH, "math_verify", 0.05))
    # the math part cannot be contradicted at these sizes (amendment of 2026-12-06): supports or inconclusive
    tests = [_t(f"3{g} {name}", f"3{g}", "3", "math", f"M (s = 1.1) − unedited, {name}", "scale", m, "baseline", tasks,
                metric, "gain", expect="higher", factor=factor, family="F3-math", can_contradict=False)
             for g, (name, tasks, metric, factor) in zip("ab", math_tasks, strict=True)]
    tests += [_t(f"3{g} {name}", f"3{g}", "3", "non-math", f"M (s = 1.1) − unedited, {name}", "scale", m, "baseline",
                 tasks, "acc", "equivalence", margin=0.03, family="F3-nonmath")
              for g, (name, tasks) in zip("cd", (("MMLU", MMLU), ("RACE-high", RACE)), strict=True)]
    return tests


def _generalisation_tests() -> list[Test]:
    m = {"intervention": "prune", "method": "mathneuro", "top_k": 0.15, "filter": "mmlu"}
    maths = (("MATH", "minerva_math", "math_verify", 0.0), ("MathQA", "mathqa", "acc", 0.2),
             ("EGSM", "egsm", STRICT, 0.0))  # asked as gsm8k_cot: its filters name the metric, as GSM8K's
    tests = [_t(f"6{g} {name}", f"6{g}", "6", "math", f"M − random, {name}", "generalisation", m, "random", (task,),
                metric, "direction", expect="lower", family="F6-math")
             for g, (name, task, metric, _) in zip("abc", maths, strict=True)]
    tests += [_t(f"6{g} {name}", f"6{g}", "6", "math", f"M − unedited vs −0.5 × (unedited − chance), {name}",
                 "generalisation", m, "baseline", (task,), metric, "threshold", factor=-0.5, chance=chance,
                 family="F6-math")
              for g, (name, task, metric, chance) in zip("def", maths, strict=True)]
    nonmath = (("HellaSwag", "hellaswag", "acc_norm"), ("PIQA", "piqa", "acc_norm"),
               ("WinoGrande", "winogrande", "acc"), ("MuTual", "mutual", "r@1"))
    tests += [_t(f"6{g} {name}", f"6{g}", "6", "non-math", f"M − random, {name}", "generalisation", m,
                 "random", (task,), metric, "equivalence", margin=0.05, family="F6-nonmath")
              for g, (name, task, metric) in zip("ghij", nonmath, strict=True)]
    tests.append(_t("6k WikiText-2", "6k", "6", "non-math", "M vs random, WikiText-2 log word-perplexity ratio",
                    "generalisation", m, "random", ("wikitext",), "word_perplexity", "equivalence",
                    margin=math.log(1.10), family="F6-nonmath"))
    return tests


# -------------------------------------------------------------------------- claims 4 and 5 (rules)
def claim4(tree: Mapping[str, Sequence[Packed]], band: tuple[float, float] = (1.2, 2.1)) -> dict:
    """M's share of the upstream parameters and its spread over blocks, per draw and filter (§5.4); ``band``:
    the share's band in percent of the upstream parameters (the plan's)."""
    draws: dict[str, list[dict]] = {}
    for packed in tree.get("identification") or []:  # header-only records of every identification (pack_amended.py)
        p = packed.point
        if packed.kind != "point" or p.get("method") != "mathneuro" or p.get("model") != MODEL \
                or not math.isclose(float(p.get("top_k") or 0), 0.15):
            continue
        sel = packed.header.get("selection") or {}
        upstream, blocks = UPSTREAM[MODEL]
        recorded = sel.get("num_parameters_upstream")
        if recorded is not None and int(recorded) != upstream:
            return {"status": f"not judged: a record's upstream count {recorded} differs from the plan's {upstream}"}
        edited = sel.get("num_weights_edited", sel.get("num_selected"))
        layers = {int(k): float(v) for k, v in (sel.get("per_layer") or {}).items() if str(k).isdigit()}
        total = sum(layers.values())
        if edited is None or not total:
            continue
        shares = [layers.get(b, 0.0) / total * blocks for b in range(blocks)]  # 1.0 = the even share
        draws.setdefault(str(p.get("filter")), []).append({
            "seed": p.get("seed"), "upstream": edited / upstream,
            "loaded": edited / float(sel.get("num_parameters") or math.nan),
            "low": min(shares), "high": max(shares)})
    if not draws:
        return {"status": NOT_RUN, "parts": {"share": NOT_RUN, "spread": NOT_RUN}, "draws": {}}
    low, high = band[0] / 100, band[1] / 100
    inside = [lo_ok for rows in draws.values() for lo_ok in (low <= r["upstream"] <= high for r in rows)]
    outside_filter = any(all(not low <= r["upstream"] <= high for r in rows) for rows in draws.values())
    share = "supported" if all(inside) else "contradicted" if outside_filter else "inconclusive"
    rows = [r for rs in draws.values() for r in rs]
    spread = ("supported" if all(0.5 <= r["low"] and r["high"] <= 2 for r in rows) else
              "contradicted" if any(r["low"] < 0.25 or r["high"] > 4 for r in rows) else "inconclusive")
    return {"status": "ok", "parts": {"share": share, "spread": spread}, "draws": draws}


def _claim5_at(packs: Sequence[Packed]) -> tuple[dict[int, dict], str]:
    """``({N: row}, source)``: from the committed per-matrix overlap records where there are any (every verdict
    rebuilt from records), else from the aggregated table (its selections are not committed)."""
    if any(p.kind == "overlap" for p in packs):
        shares = overlap_shares(packs, {"model": MODEL, "filter": "mmlu", "top_k": 0.15, "method": "mathneuro"})
        at = {n: {"a_in_b_mean": shares[(n, "M")]["share"], "pairs": shares[(n, "M")]["pairs"],
                  "topk_a_in_b_mean": (shares.get((n, "topk")) or {}).get("share")}
              for n in (1, 10, 100) if (n, "M") in shares}
        return at, "records"
    at = {}
    for packed in packs:
        if packed.name != AMENDED_TABLE:  # the issue-16 table (two draws, seen before the plan) is context only
            continue
        for row in packed.rows:
            if (row.get("model") == MODEL and row.get("filter") == "mmlu"
                    and math.isclose(float(row.get("top_k") or 0), 0.15)):
                at[int(row["num_samples"])] = row
    return at, "table"


def claim5(tree: Mapping[str, Sequence[Packed]], study: str = "data_efficiency") -> dict:
    """The share of one draw's M in another's at N = 1, 10, 100 (K = 15 %, MMLU filter; §5.5), from the
    per-matrix overlap records (:mod:`claimslib.overlap_records`) or, without them, the aggregated table
    (``study``: the records' study in ``tree``)."""
    try:
        at, source = _claim5_at(tree.get(study) or [])
    except ValueError as err:
        return {"status": f"not judged: {err}", "parts": {"overlap": "not judged"}, "at": {}, "source": "records"}
    # an N with fewer than two draws so far (claim 1's N = 100 selections finish one point at a time) has no overlap
    if not all(n in at and at[n].get("a_in_b_mean") is not None for n in (1, 10, 100)):
        return {"status": NOT_RUN, "parts": {"overlap": NOT_RUN}, "at": at, "source": source}
    share = [float(at[n]["a_in_b_mean"]) for n in (1, 10, 100)]
    grows = share[0] <= share[1] <= share[2]
    status = ("supported" if share[0] >= 0.65 and share[2] >= 0.90 and grows else
              "contradicted" if share[0] < 0.65 or share[2] < 0.90 else "inconclusive")
    return {"status": "ok", "parts": {"overlap": status}, "at": at, "share": share, "source": source}


# ------------------------------------------------------------------------------------------ output
#: Each claim's section of ANALYSIS_PLAN.md (all as amended on 2026-12-06) and its later amendments.
SECTIONS = {"1": "§5.1", "2": "§5.2", "2 (LAPE)": "§5.2, §10", "3": "§5.3", "4": "§5.4", "5": "§5.5", "6": "§5.6"}
LATER_AMENDMENTS = {"3": ("2026-12-07",), "6": ("2026-12-07",)}  # 3: its own CPU's baseline; 6: EGSM's metric name


def _verdict_lines(verdicts: Mapping[str, str], confirmatory: Mapping[str, str] | None = None) -> list[str]:
    """One line per claim: its adjusted verdict and the plan's section (experiments/README.md's summary), and the
    confirmatory amendment's verdict where it has one."""
    lines = []
    for cid, statement, _, _ in CLAIMS:
        amended = ", ".join(("2026-12-06", *LATER_AMENDMENTS.get(cid, ())))
        confirm = (confirmatory or {}).get(cid)
        also = f"; confirmatory (amendment of 2026-12-07): **{confirm}**" if confirm else ""
        lines.append(f"- **Claim {cid}** ({SECTIONS[cid]}, amended {amended}): {verdicts[cid]}{also}. {statement}.")
    return lines


def _claim_rows(rows: Sequence[dict], c4: dict, c5: dict) -> tuple[list[str], dict[str, str]]:
    out = ["| claim | parts (adjusted) | key numbers: estimate [95 %] | margin / threshold | verdict (unadjusted) "
           "| adjusted decision |", "|---|---|---|---|---|---|"]
    verdicts = {}
    for cid, statement, parts, margin in CLAIMS:
        mine = [r for r in rows if r["test"].claim == cid]
        if cid in NOT_TESTABLE:
            verdict = adjusted = "not testable here"
            shown, numbers = NOT_TESTABLE[cid], "—"
        elif cid in ("4", "5"):
            info = c4 if cid == "4" else c5
            statuses = list(info.get("parts", {}).values()) or [NOT_RUN]
            verdict = claim_verdict(statuses) if info["status"] in ("ok", NOT_RUN) else info["status"]
            adjusted = f"{verdict} (descriptive rule, no test)"
            shown = ", ".join(f"{p}: {s}" for p, s in info.get("parts", {}).items()) or "—"
            numbers = _claim4_numbers(c4) if cid == "4" else _claim5_numbers(c5)
        else:
            shown, verdict, adjusted = tested_claim(mine, parts)
            numbers = key_numbers(mine)
        verdicts[cid] = adjusted
        out.append(f"| {cid}. {statement} | {shown} | {numbers} | {margin} | {verdict} | **{adjusted}** |")
    return out, verdicts


def _claim4_numbers(c4: dict) -> str:
    draws = c4.get("draws") or {}
    if not draws:
        return c4.get("status") if c4.get("status") not in ("ok", NOT_RUN) else "—"
    parts = []
    for filt, rows in sorted(draws.items()):
        up = [r["upstream"] * 100 for r in rows]
        loaded = [r["loaded"] * 100 for r in rows]
        parts.append(f"{filt} filter, {len(rows)} draws: {min(up):.2f}–{max(up):.2f} % of upstream "
                     f"({min(loaded):.2f}–{max(loaded):.2f} % of loaded); blocks "
                     f"{min(r['low'] for r in rows):.2f}–{max(r['high'] for r in rows):.2f} × even")
    return "; ".join(parts)


def _claim5_numbers(c5: dict) -> str:
    at = c5.get("at") or {}
    if not all(n in at for n in (1, 10, 100)):
        return "—"

    def share(n: int, key: str) -> str:  # "—": fewer than two draws at this N so far
        return f"{float(at[n][key]):.2f}" if at[n].get(key) is not None else "—"

    m = " / ".join(share(n, "a_in_b_mean") for n in (1, 10, 100))
    top = " / ".join(share(n, "topk_a_in_b_mean") for n in (1, 10, 100))
    pairs = " / ".join(str(at[n].get("pairs")) for n in (1, 10, 100))
    source = ("rebuilt from the committed per-matrix overlap records" if c5.get("source") == "records" else
              f"read from the aggregated table `data_efficiency/{AMENDED_TABLE}`, not rebuilt from per-matrix records "
              "(the selections are not committed)")
    return (f"M at N = 1 / 10 / 100: {m} (pairs of draws: {pairs}); "
            f"math top-K sets (secondary): {top}; {source}")


# ------------------------------------------------------------- the confirmatory amendment (2026-12-07)
def confirm_tests(am: Amendment) -> list[Test]:
    """Claim 1's tests 1a-1d (1b decided at the amendment's factor), 1b at each reported factor (role
    ``reported``: shown, never in a part or a family), claim 1's context rows, and test 6d (one test, no
    family), at the amendment's sizes; ids end in "(confirm)"."""
    sel = {"intervention": "prune", "top_k": 0.15, "filter": "mmlu"}
    m, c, n = {**sel, "method": "mathneuro"}, " (confirm)", am.sizes

    def one(id_: str, group: str, claim: str, part: str, title: str, study: str, select: Mapping[str, Any],
            reference: str, tasks: Sequence[str], metric: str, rule: str, **kw: Any) -> Test:
        return _t(id_ + c, group, claim, part, title, study, select, reference, tasks, metric, rule,
                  min_n=n[tasks[0]], **kw)

    tests = [one("1a", "1a", "1", "math", "M − random, GSM8K", "prune", m, "random", GSM8K, STRICT, "direction",
                 expect="lower", family="C1-math"),
             one("1b", "1b", "1", "math", f"M's GSM8K accuracy vs {am.decides_1b:.2f} × unedited", "prune", m,
                 "baseline", GSM8K, STRICT, "proportion", factor=am.decides_1b, family="C1-math"),
             one("1c", "1c", "1", "non-math", "M − random, RACE-high", "prune", m, "random", RACE, "acc", "equivalence",
                 margin=0.05, family="C1-nonmath"),
             one("1d", "1d", "1", "non-math", "M − random, MMLU", "prune", m, "random", MMLU, "acc", "equivalence",
                 margin=0.05, family="C1-nonmath")]
    tests += [one(f"1b @ {f:.2f}", "1b", "1", "math", f"M's GSM8K accuracy vs {f:.2f} × unedited (reported, not "
                  "decided)", "prune", m, "baseline", GSM8K, STRICT, "proportion", factor=f, role="reported")
              for f in am.reported_1b]
    for who, label in (("mathneuro", "M"), ("random", "random")):
        tests += [one(f"1ctx {label} {name}", "1ctx", "1", "", f"{label} − unedited, {name}", "prune",
                      {**sel, "method": who}, "baseline", tasks, metric, "context", role="context")
                  for name, tasks, metric in (("GSM8K", GSM8K, STRICT), ("RACE-high", RACE, "acc"),
                                              ("MMLU", MMLU, "acc"))]
    tests.append(one("6d MATH", "6d", "6", "math", "M − unedited vs −0.5 × (unedited − chance), MATH",
                     "generalisation", m, "baseline", MATH, "math_verify", "threshold", factor=-0.5, chance=0.0))
    return tests


def _confirm_rows(am: Amendment, tree: Mapping[str, Sequence[Packed]], resamples: int, seed: int,
                  pairings: Sequence[Pairing]) -> list[dict]:
    """The confirm tests' rows: Holm within claim 1's families; 6d (no family) decided as it stands; a test
    with fewer draws than the amendment names is not judged."""
    rows = [evaluate_test(t, tree, resamples=resamples, seed=seed, pairings=pairings) for t in confirm_tests(am)]
    planned = {**{g: len(am.seeds["claim1"]) for g in ("1a", "1b", "1c", "1d", "1ctx")}, "6d": len(am.seeds["6d"])}
    rows = adjust_families(require_draws(rows, planned))
    for row in rows:
        if row["test"].family is None and row["test"].role == "primary" and row["status"] == "ok":
            row["holm"] = row["decision"]
    return rows


def confirm_section(am: Amendment | None, root: Path, plan_rows: Sequence[dict], verdicts: Mapping[str, str], *,
                    resamples: int, seed: int, plan_text: str) -> tuple[list[str], dict[str, str]]:
    """The README lines of the confirmatory amendment (one per claim; its tests' rows once any has records)
    and its verdicts by claim (those not run left out)."""
    if am is None:
        return [], {}
    tree = confirm_tree(root, am)
    pairings = parse_pairings(plan_text, am.records)
    rows = _confirm_rows(am, tree, resamples, seed, pairings)
    plain = {c: v.removesuffix(" (descriptive rule, no test)") for c, v in verdicts.items()}
    by_band = {name: claim4(tree, band) for name, band in am.bands.items()}
    c5 = claim5(tree, study="pairs")
    got = {"1": claim1_line(am, rows, plain["1"]),
           "4": claim4_line(am, by_band, _claim4_numbers(by_band[am.decides_band]), plain["4"], CLAIM4_FILTERS),
           "5": claim5_line(am, c5, _claim5_numbers(c5), plain["5"]), "6": claim6_line(am, rows, plan_rows, plain["6"])}
    files = sum(len(v) for v in tree.values())
    lines = [f"#### The confirmatory amendment ({am.id})", "",
             f"Claims 1, 4, 5 and test 6d again on fresh examples and fresh draws, one machine kind per comparison "
             f"(ANALYSIS_PLAN.md, amendment \"2026-12-07 (confirmatory)\"; sizes, draws and bands read from its "
             f"machine-readable block), from {files} record file(s) under `{am.records}/`. Beside each, the amended "
             "plan's verdict; where they differ, both are stated and this amendment's is the confirmatory one. "
             "Claims 2 and 3 and claim 6's other tests are not run again.", "",
             *(line for _, line in got.values()), ""]
    if files:
        where = (f"the amendment names for `{am.records}/` (its block's `machine_kind.cross_kind_pairings`, or a "
                 f"`cross-kind-pairings` block entry with `\"records\": \"{am.records}\"`)")
        lines += [hardware_line(tree), "", *refused_lines(rows, pairings, where), "", *margin_note(rows),
                  *([""] if margin_note(rows) else []), *test_rows(rows, resamples), ""]
    return lines, {c: v for c, (v, _) in got.items() if v != NOT_RUN}


def plan_pairings(plan: Path = PLAN) -> list[Pairing]:
    """The cross-kind pairings the plan names for the amended plan's records (none when it names none)."""
    return parse_pairings(plan.read_text()) if plan.is_file() else []


def build(root: Path = RECORDS, *, resamples: int = RESAMPLES, seed: int = 0, plan: Path = PLAN) -> str:
    """The README section (between the markers), from the records under ``root``; ``seed``: the bootstrap's
    (the README's is 0; other seeds show how far the Monte Carlo error moves the numbers)."""
    tree = read_tree(root)
    pairings = plan_pairings(plan)
    rows = evaluate(plan_tests(), tree, resamples=resamples, seed=seed, pairings=pairings)
    table, verdicts = _claim_rows(rows, claim4(tree), claim5(tree))
    plan_text = plan.read_text() if plan.is_file() else ""
    confirm, confirmatory = confirm_section(read_amendment(plan_text), root, rows, verdicts, resamples=resamples,
                                            seed=seed, plan_text=plan_text)
    files = sum(len(v) for v in tree.values())
    studies = ", ".join(f"`{k}` ({len(v)})" for k, v in tree.items()) or "none"
    lines = [
        "### The claims table (generated)", "",
        f"Generated by `experiments/claims/claims.py` (`make claims`) from {files} committed record file(s) in "
        f"`experiments/records/` (studies: {studies}) under [ANALYSIS_PLAN.md](ANALYSIS_PLAN.md); do not edit by "
        f"hand: `tests/test_claims.py` checks that this section is the script's output. Intervals: hierarchical "
        f"bootstrap over identification draws and examples ({resamples:,} resamples{f', seed {seed}' if seed else ''}),"
        " hulled with Newcombe's "
        "interval for 0/1 metrics (Wilson's for one proportion; rule of three when nothing changed). Decisions: "
        "supports / contradicts / inconclusive per the plan's rule; adjusted: Holm within each family (§6) on the "
        "contradicting side, and on the supporting side of secondary families only (a part is an intersection-union "
        "test; amendment of 2026-12-06). \"not run\": no committed records yet. Monte Carlo error "
        "(`claimslib.mcerror`): each bootstrap p-value's 95 % binomial (Wilson) interval over the resamples, "
        "each interval end's 95 % order-statistic interval (the half-widths are shown); a decision those would "
        f"make otherwise reads \"{AT_MARGIN}\", not decided. A comparison whose draws pair records of two kinds "
        "of machine (name and CPU kernel flags) is refused unless the plan names the pairing; the decision it would "
        "have had is shown as context.", "",
        *_verdict_lines(verdicts, confirmatory), "", hardware_line(tree), "", code_line(tree), "", *table, "",
        *refused_lines(rows, pairings), "", *margin_note(rows), *([""] if margin_note(rows) else []), *confirm,
        "#### Every test (D = draws, n = examples common to every draw; up / down = examples changed each way, "
        "summed over draws)", "", *test_rows(rows, resamples), "",
    ]
    return "\n".join(lines)


def seed_verdicts(root: Path = RECORDS, *, seeds: int = 5, resamples: int = RESAMPLES,
                  plan: Path = PLAN) -> dict[int, dict[str, str]]:
    """``{seed: {test or claim: decision}}`` of the table rebuilt with bootstrap seeds 0..seeds-1 (each test's
    decision and adjusted decision, a refused test's across kinds, each claim's verdict): what the Monte Carlo
    error leaves of the verdicts."""
    tree, pairings = read_tree(root), plan_pairings(plan)
    plan_text = plan.read_text() if plan.is_file() else ""
    out: dict[int, dict[str, str]] = {}
    for seed in range(seeds):
        rows = evaluate(plan_tests(), tree, resamples=resamples, seed=seed, pairings=pairings)
        verdicts = _claim_rows(rows, claim4(tree), claim5(tree))[1]
        got = {f"claim {c}": v for c, v in verdicts.items()}
        confirmatory = confirm_section(read_amendment(plan_text), root, rows, verdicts, resamples=resamples,
                                       seed=seed, plan_text=plan_text)[1]
        got.update({f"claim {c} (confirmatory)": v for c, v in confirmatory.items()})
        for r in rows:
            across = r.get("across") or {}
            got[r["test"].id] = f"{r['decision'] or across.get('decision')} / {r['holm'] or across.get('holm')}"
        out[seed] = got
    return out


def readme_section(text: str) -> str:
    """The README's text between the markers (ValueError when they are missing)."""
    if BEGIN not in text or END not in text:
        raise ValueError(f"{README}: no {BEGIN} ... {END} section")
    return text.split(BEGIN, 1)[1].split(END, 1)[0].strip("\n")


def write_readme(section: str, path: Path | None = None) -> bool:
    """Replace the README's section (default: experiments/README.md); True when it changed."""
    path = README if path is None else path
    text = path.read_text()
    head, rest = text.split(BEGIN, 1)
    new = f"{head}{BEGIN}\n{section}\n{END}{rest.split(END, 1)[1]}"
    if new != text:
        path.write_text(new)
    return new != text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", default=str(RECORDS), help="records root (default: %(default)s)")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--write", action="store_true", help="write the section into experiments/README.md")
    mode.add_argument("--check", action="store_true", help="exit 1 if the README's section differs")
    mode.add_argument("--seeds", type=int, metavar="N", help="rebuild with bootstrap seeds 0..N-1: print every "
                      "decision that differs between seeds (exit 1 if any does)")
    args = parser.parse_args(argv)
    if args.seeds:
        by_seed = seed_verdicts(Path(args.records), seeds=args.seeds)
        keys = list(by_seed[0])
        moved = [k for k in keys if len({v[k] for v in by_seed.values()}) > 1]
        for k in keys:
            print(f"{k}: {' | '.join(by_seed[s][k] for s in by_seed)}{'   <- differs' if k in moved else ''}")
        print(f"{len(moved)} of {len(keys)} decisions differ between {args.seeds} seeds ({RESAMPLES:,} resamples)")
        return 1 if moved else 0
    section = build(Path(args.records))
    if args.write:
        print(f"{'updated' if write_readme(section) else 'unchanged'}: {README}")
    elif args.check:
        same = readme_section(README.read_text()) == section.strip("\n")
        print("README claims section is up to date" if same else "README claims section differs: run make claims")
        return 0 if same else 1
    else:
        print(section)
    return 0


if __name__ == "__main__":
    sys.exit(main())
