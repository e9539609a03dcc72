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

from mathneuro.report.machines import RECORDS, amendment_blocks
from mathneuro.report.records import SUFFIX, Packed, read_study, read_tree

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
