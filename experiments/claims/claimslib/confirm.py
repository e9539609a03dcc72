"""The confirmatory amendment's records, read as its machine-readable block says (ANALYSIS_PLAN.md, amendment
"2026-12-07 (confirmatory)"; issue 53).

The amendment runs claims 1, 4, 5 and test 6d again on fresh examples and fresh draws, into a records folder
of its own (``experiments/records/confirm``), apart from the amended plan's. Its block (between
``<!-- confirmatory:begin -->`` and ``<!-- confirmatory:end -->``) names the folder, each claim's draws, the
sizes, test 1b's deciding and reported factors, claim 4's bands and claim 5's per-matrix records: the claims
table reads them from there (:func:`read_amendment`), never from copies. :func:`confirm_tree` reads the folder,
each study's points restricted to the draws the amendment names for its claim; :func:`require_draws` keeps a
comparison with fewer draws than planned undecided (a stage not finished is not judged on part of its draws).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from claimslib.claims import NOT_RUN, claim_verdict
from claimslib.claims_table import estimate_text, key_numbers, tested_claim
from claimslib.records import SUFFIX, Packed, read_study, read_tree
from mathneuro.report.machines import RECORDS, amendment_blocks

BLOCK = "confirmatory"
#: The claim (a key of the block's ``seeds``) whose draws each study of the folder holds; ``pairs``: claim 5's
#: per-matrix overlap records (the block's ``claim5.records`` folder).
STUDY_CLAIM = {"prune": "claim1", "identification": "claim4", "pairs": "claim5", "generalisation": "6d"}


@dataclass(frozen=True)
class Amendment:
    """What the claims table needs of the confirmatory amendment's block (see the module docstring)."""

    id: str
    records: str  # the records folder, relative to the repository root
    seeds: Mapping[str, tuple[int, ...]]
    sizes: Mapping[str, int]
    decides_1b: float
    reported_1b: tuple[float, ...]
    bands: Mapping[str, tuple[float, float]]  # percent of the upstream parameters
    decides_band: str
    claim5_records: str  # under ``records``
    num_samples: tuple[int, ...]
    replaces: tuple[str, ...]
    block: Mapping[str, Any] = field(default_factory=dict, repr=False)

    def folder(self, root: Path) -> Path:
        """The amendment's records folder under a records root (``root`` stands for :data:`RECORDS`)."""
        return Path(root) / Path(self.records).relative_to(RECORDS)


def read_amendment(plan_text: str) -> Amendment | None:
    """The confirmatory amendment of a plan's text, None when it has none. Raises ValueError naming a key the
    block lacks or holds wrongly."""
    block = amendment_blocks(plan_text).get(BLOCK)
    if block is None:
        return None
    try:
        return Amendment(
            id=str(block["id"]), records=str(block["records"]).rstrip("/"),
            seeds={k: tuple(int(s) for s in v) for k, v in block["seeds"].items()},
            sizes={k: int(v) for k, v in block["sizes"].items()},
            decides_1b=float(block["1b"]["decides"]), reported_1b=tuple(float(f) for f in block["1b"]["reported"]),
            bands={k: (float(v[0]), float(v[1])) for k, v in block["claim4"]["bands"].items()},
            decides_band=str(block["claim4"]["decides"]), claim5_records=str(block["claim5"]["records"]),
            num_samples=tuple(int(n) for n in block["claim5"]["num_samples"]),
            replaces=tuple(map(str, block["claim6"]["replaces"])), block=block)
    except (KeyError, TypeError, ValueError, IndexError) as err:
        raise ValueError(f"{BLOCK} block of the plan: missing or wrong key {err}") from None


def _of_draws(packed: Packed, seeds: Sequence[int]) -> bool:
    if packed.kind == "point":
        return str(packed.point.get("seed")) in map(str, seeds)
    if packed.kind == "overlap":
        return all(str((packed.header.get(side) or {}).get("seed")) in map(str, seeds) for side in ("a", "b"))
    return True


def confirm_tree(root: Path, amendment: Amendment) -> dict[str, list[Packed]]:
    """``{study: [Packed]}`` of the amendment's folder under the records ``root`` (claim 5's per-matrix records
    as study ``pairs``), each study's points and overlap records only of the draws its claim names; empty
    studies left out."""
    folder = amendment.folder(root)
    tree = read_tree(folder)
    pairs = folder / amendment.claim5_records
    if pairs.is_dir() and any(pairs.glob(f"*{SUFFIX}")):
        tree["pairs"] = read_study(pairs)
    out = {}
    for study, packs in tree.items():
        seeds = amendment.seeds.get(STUDY_CLAIM.get(study, ""))
        kept = [p for p in packs if seeds is None or _of_draws(p, seeds)]
        if kept:
            out[study] = kept
    return out


def require_draws(rows: Sequence[dict], planned: Mapping[str, int]) -> list[dict]:
    """Rows of tests judged on fewer draws than the amendment plans (``planned``: draws by test group) become
    "not judged: D of the amendment's P draws" (no decision): a stage is judged when it has finished."""
    for row in rows:
        want = planned.get(row["test"].group)
        if want and row["status"] not in ("not run",) and row.get("draws") is not None and row["draws"] < want:
            row.update(status=f"not judged: {row['draws']} of the amendment's {want} draws", decision=None,
                       holm=None)
    return list(rows)


def differ_text(confirmatory: str, amended: str) -> str:
    """The sentence beside two verdicts of one claim (the amendment's is the confirmatory one)."""
    if confirmatory == amended:
        return "The same as the amended plan's."
    return (f"The amended plan's: {amended}. They differ: this amendment's verdict is the confirmatory one "
            "(fixed before its data).")


def claim1_line(am: Amendment, rows: Sequence[dict], amended: str) -> tuple[str, str]:
    """(verdict, README line) of claim 1 under the amendment, from its tests' rows (1b's reported rows beside)."""
    mine = [r for r in rows if r["test"].claim == "1"]
    seeds = ", ".join(map(str, am.seeds["claim1"]))
    head = f"- **Claim 1** (confirmatory: tests 1a-1d on draws {seeds}, their own unedited baseline)"
    if all(r["status"] == NOT_RUN for r in mine):
        return NOT_RUN, f"{head}: not run (no records under `{am.records}/prune`)."
    shown, verdict, adjusted = tested_claim(mine, ("math", "non-math"))
    reported = "; ".join(f"{r['test'].title}: {r['decision'] or r['status']}"
                         + (f" ({estimate_text(r)}, t = {r['threshold']:.3f})" if r["status"] == "ok" else "")
                         for r in mine if r["test"].role == "reported")
    return adjusted, (f"{head}: **{adjusted}** (unadjusted: {verdict}; {shown}; 1b decided at {am.decides_1b:.2f} × "
                      f"unedited). Key numbers: {key_numbers(mine)}. {reported}. {differ_text(adjusted, amended)}")


def claim4_line(am: Amendment, by_band: Mapping[str, dict], numbers: str, amended: str,
                filters: Sequence[str]) -> tuple[str, str]:
    """(verdict, README line) of claim 4 under the amendment: ``by_band``: §5.4's rule on the amendment's
    identifications against each of its bands (the deciding one and those reported); ``numbers``: the deciding
    reading's numbers; ``filters``: the filters every planned draw must have before it is judged."""
    head = f"- **Claim 4** (confirmatory: identifications of draws {', '.join(map(str, am.seeds['claim4']))})"
    decides = by_band[am.decides_band]
    if decides["status"] == NOT_RUN:
        return NOT_RUN, f"{head}: not run (no records under `{am.records}/identification`)."
    if decides["status"] != "ok":
        return decides["status"], f"{head}: {decides['status']}. {differ_text(decides['status'], amended)}"
    planned = len(am.seeds["claim4"])
    short = [f for f in filters if len(decides["draws"].get(f, ())) < planned]
    verdict = "incomplete" if short else claim_verdict(list(decides["parts"].values()))
    if short:
        head += f" (fewer than the {planned} draws of the {', '.join(short)} filter)"
    lo, hi = am.bands[am.decides_band]
    others = "; ".join(f"against the {name}'s band [{b[0]}, {b[1]}] % (reported, not decided): share "
                       f"{by_band[name]['parts']['share']}" for name, b in am.bands.items() if name != am.decides_band)
    return verdict, (f"{head}: **{verdict}** (descriptive rule, no test; decided on the {am.decides_band}'s band "
                     f"[{lo}, {hi}] % of the upstream parameters: share {decides['parts']['share']}, spread "
                     f"{decides['parts']['spread']}); {others}. Numbers: {numbers}. "
                     f"{differ_text(verdict, amended)}")


def claim5_line(am: Amendment, c5: dict, numbers: str, amended: str) -> tuple[str, str]:
    """(verdict, README line) of claim 5 under the amendment from §5.5's rule on its pair records (``c5``), judged
    once every pair of the planned draws is there at each N."""
    draws = len(am.seeds["claim5"])
    head = f"- **Claim 5** (confirmatory: draws {', '.join(map(str, am.seeds['claim5']))}, per-matrix records)"
    if c5["status"] == NOT_RUN and not c5.get("at"):
        return NOT_RUN, f"{head}: not run (no records under `{am.records}/{am.claim5_records}`)."
    if c5["status"] not in ("ok", NOT_RUN):
        return c5["status"], f"{head}: {c5['status']}. {differ_text(c5['status'], amended)}"
    short = [n for n in am.num_samples if (c5.get("at") or {}).get(n, {}).get("pairs") != draws * (draws - 1) // 2]
    verdict = "incomplete" if short else claim_verdict(list(c5["parts"].values()))
    pairs = f" (fewer than the {draws * (draws - 1) // 2} pairs of draws at N = {short})" if short else ""
    return verdict, (f"{head}: **{verdict}**{pairs} (descriptive rule, no test). Numbers: {numbers}. "
                     f"{differ_text(verdict, amended)}")


def claim6_line(am: Amendment, rows: Sequence[dict], plan_rows: Sequence[dict], amended: str) -> tuple[str, str]:
    """(verdict, README line) of claim 6 with the amendment's 6d in place of the amended plan's (``plan_rows``:
    the amended plan's rows; its other tests keep their committed decisions)."""
    new = [r for r in rows if r["test"].claim == "6"]
    head = (f"- **Claim 6** (confirmatory: test {', '.join(am.replaces)} on {am.sizes['minerva_math']} fresh MATH "
            f"problems, draws {', '.join(map(str, am.seeds['6d']))}, replacing the amended plan's; its other tests "
            "keep their committed results)")
    if all(r["status"] == NOT_RUN for r in new):
        return NOT_RUN, f"{head}: not run (no records under `{am.records}/generalisation`)."
    kept = [r for r in plan_rows if r["test"].claim == "6" and r["test"].group not in am.replaces]
    shown, verdict, adjusted = tested_claim([*kept, *new], ("math", "non-math"))
    (d,) = [r for r in new if r["test"].role == "primary"]
    numbers = f"{estimate_text(d)}, t = {d['threshold']:+.3f}" if d["status"] == "ok" else d["status"]
    return adjusted, (f"{head}: **{adjusted}** (unadjusted: {verdict}; {shown}). 6d: {d['decision'] or d['status']} "
                      f"({numbers}). {differ_text(adjusted, amended)}")
