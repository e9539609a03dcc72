"""The confirmatory amendment's machine-kind guard and packer (``claims_confirm.sh``; ANALYSIS_PLAN.md, amendment
of 2026-12-07 (confirmatory)). Records go to ``experiments/records/confirm/<study>/``, apart from the amended
plan's, so that nothing of the earlier plan is read as the amendment's evidence.

    .venv/bin/python experiments/claims/pack_confirm.py kind GROUP [--new-kind] [--root ROOT] [--out RECORDS]
    .venv/bin/python experiments/claims/pack_confirm.py pack [--root ROOT] [--out RECORDS]

``kind``: one machine kind for every comparison (its points and its baseline). The first stage the amendment
runs records this machine's kind (CPU model and the flags that pick its bf16 kernels, ``machine_kind``) in
``RECORDS/confirm/machine_kind.json``, committed with the first records. A stage of a comparison group
(``claim1``: base1 + claim1; ``claim45``; ``claim6d``: base6d + claim6d) runs only on its group's recorded kind,
else on the amendment's; on another it is refused (exit 2), unless ``--new-kind``: then the group restarts on
this kind (its run dirs move to ``ROOT/abandoned/``, its packed records are removed, the restart is logged in
``machine_kind.json``), so no comparison pairs records of two kinds.

``pack``: base1 + claim1 -> ``confirm/prune``; base6d + claim6d -> ``confirm/generalisation``; every
identification at K = 15 %, N = 100 (claim 4: both filters) -> ``confirm/identification`` (header only); claim
5's per-matrix counts -> ``confirm/data_efficiency/pairs/``: one ``overlap`` record per N, pair of draws and set
(:mod:`claimslib.overlap_records`, the one format ``experiments/claims/claims.py`` reads: each matrix's sizes and
intersection, each selection's content hash and its file's sha256), and the overlap table
``confirm/data_efficiency/confirm_mmlu``. Only complete points are packed; packing is deterministic.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import shutil
import sys
from pathlib import Path

from claimslib.confirm import read_amendment
from claimslib.overlap_records import SET_FILES, write_pairs
from claimslib.records import (
    SELECTION_KEPT,
    SUFFIX,
    pack_baseline,
    pack_sweep,
    pack_table,
    point_name,
    write_packed,
)

from mathneuro.report.efficiency import efficiency_table, write_efficiency_csv
from mathneuro.report.sweep import load_results


def _sibling(name: str):
    """Another script of experiments/ as a module (the folder is not a package)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, Path(__file__).resolve().parent / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_amended = _sibling("pack_amended")
MODEL, this_machine = _amended.MODEL, _amended.this_machine
HERE = Path(__file__).resolve().parent
AMENDMENT = "2026-12-07-confirmatory"
#: comparison groups: the stages whose records are compared with each other, hence run on one kind
GROUPS = {"claim1": ("base1", "claim1"), "claim45": ("claim45",), "claim6d": ("base6d", "claim6d")}
STUDY_OF = {"claim1": "prune", "claim45": ("identification", "data_efficiency"), "claim6d": "generalisation"}
KIND_FILE = "machine_kind.json"


def group_of(stage: str) -> str:
    return next(g for g, stages in GROUPS.items() if stage in stages or stage == g)


def _slug(kind: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in kind.lower()).strip("_")


#: measured on the AMD EPYC with AVX2 only (2026-12-07, studies/claims_confirm.md): the 1.5B's forward at one thread
#: runs about 3 tokens/s in bf16 there, about 50 times slower than the planned Xeon with AMX
UNPLANNED_NOTE = ("the amendment is sized for its planned kind; on a CPU without bf16 units (no amx_bf16 or "
                  "avx512_bf16) bf16 runs about 50x slower (claim45 alone: about 23 CPU-hours on an AVX2 EPYC)")


def planned_kind(plan: Path = HERE.parent / "ANALYSIS_PLAN.md") -> str | None:
    """The machine kind the amendment's block plans its runs for (``machine_kind.planned``), None if it names none."""
    am = read_amendment(plan.read_text())
    return (am.block.get("machine_kind") or {}).get("planned") if am is not None else None


def check_kind(stage: str, root: Path, out: Path, *, new_kind: bool = False, here: str | None = None,
               planned: str | None = None, unplanned: bool = False) -> str:
    """This machine's kind if ``stage`` may run on it (recording it where nothing was); raises SystemExit(2).
    The amendment's first stage runs only on the ``planned`` kind, unless ``unplanned``: the first stage binds
    every group to its kind, so starting on a slower kind by accident would tie the whole amendment to it."""
    here = here or this_machine()
    path = out / "confirm" / KIND_FILE
    state = json.loads(path.read_text()) if path.is_file() else {"amendment": AMENDMENT, "kind": None, "groups": {},
                                                                 "restarts": []}
    if state["kind"] is None and planned and here != planned and not unplanned:
        raise SystemExit(f"error: {stage}: this machine is {here}, not the amendment's planned {planned}: "
                         f"{UNPLANNED_NOTE}. Run on the planned kind, or set CONFIRM_UNPLANNED_KIND=1 to start "
                         f"the amendment here (every stage then runs on this kind)")
    group = group_of(stage)
    wanted = state["groups"].get(group) or state["kind"]
    if wanted is not None and wanted != here:
        if not new_kind:
            raise SystemExit(f"error: {stage}: the amendment's {group} comparisons run on {wanted}; this machine is "
                             f"{here}. Run on that kind, or set CONFIRM_NEW_KIND=1 to restart all of {group} here")
        _restart(group, root, out, wanted, here)
        state["restarts"].append({"group": group, "from": wanted, "to": here,
                                  "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%MZ")})
    state["kind"] = state["kind"] or here
    state["groups"][group] = here
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(state, indent=1, sort_keys=True) + "\n")
    return here


def _restart(group: str, root: Path, out: Path, old: str, new: str) -> None:
    """Move the group's run dirs aside and remove its packed records: its comparisons start again on ``new``."""
    for stage in GROUPS[group]:
        if (root / stage).exists():
            dest = root / "abandoned" / _slug(old) / stage
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.move(str(root / stage), str(dest))
    studies = STUDY_OF[group] if isinstance(STUDY_OF[group], tuple) else (STUDY_OF[group],)
    for study in studies:
        shutil.rmtree(out / "confirm" / study, ignore_errors=True)
    print(f"{group}: restarted on {new} (was {old}); run dirs under {root / 'abandoned'}", file=sys.stderr)


def _complete(path: Path) -> list[dict]:
    return load_results(path)[0] if path.is_dir() else []


def _pack_comparison(root: Path, folder: Path, study: str, base_stage: str, stage: str) -> list[Path]:
    task_dirs = {d.name: d for d in sorted((root / base_stage).glob("*")) if d.is_dir()}
    written: list[Path] = []
    base = pack_baseline(task_dirs, folder, study=study, model=MODEL) if task_dirs else None
    if base is not None:
        written.append(base)
    if _complete(root / stage):
        if base is None:
            print(f"{stage}: points finished but {base_stage} has no task: not packed", file=sys.stderr)
            return written
        written += pack_sweep([root / stage], folder, study=study, baseline=base.name[: -len(SUFFIX)])
    return written


def _identifications(root: Path, folder: Path) -> list[Path]:
    """Header-only records of M at K = 15 %, N = 100, both filters (claim 4)."""
    written = []
    for result in [*_complete(root / "claim45" / "claim4"), *_complete(root / "claim45" / "claim5")]:
        point = result.get("point") or {}
        if (point.get("method") != "mathneuro" or not math.isclose(float(point.get("top_k") or 0), 0.15)
                or int(point.get("num_samples") or 0) != 100):
            continue
        name = point_name(point)
        selection = {k: v for k, v in (result.get("selection") or {}).items() if k in SELECTION_KEPT}
        header = {"kind": "point", "study": "identification", "name": name, "point": point, "selection": selection,
                  "method_facts": result.get("method_facts"), "source": str(result.get("_job")),
                  **{k: result[k] for k in ("hardware", "provenance") if result.get(k)}}
        folder.mkdir(parents=True, exist_ok=True)
        written.append(write_packed(folder / f"{name}{SUFFIX}", header, []))
    return written


def _claim5(root: Path, folder: Path) -> list[Path]:
    """Claim 5's per-matrix ``overlap`` records of every pair of draws at each N (the kind
    ``experiments/claims/claims.py`` reads: :mod:`claimslib.overlap_records`, each draw's selection files'
    sha256 in its info) into ``folder/pairs``, and the aggregated table beside them."""
    results = [r for r in _complete(root / "claim45" / "claim5") if (r.get("point") or {}).get("method") == "mathneuro"]
    saved = [r for r in results if (Path(str(r["_dir"])) / SET_FILES["M"]).is_file()]
    if not saved:
        return []
    written = write_pairs(saved, folder / "pairs")
    table = [r for r in efficiency_table(results, reference_samples=100) if r.get("filter") == "mmlu"]
    if table:
        write_efficiency_csv(table, root / "claim45" / "data_efficiency.csv")
        written.append(pack_table(root / "claim45" / "data_efficiency.csv", folder, study="data_efficiency",
                                  name="confirm_mmlu"))
    return written


def pack(root: Path, out: Path) -> list[Path]:
    """Every file written (see the module docstring)."""
    base = out / "confirm"
    written = _pack_comparison(root, base / "prune", "prune", "base1", "claim1")
    written += _pack_comparison(root, base / "generalisation", "generalisation", "base6d", "claim6d")
    written += _identifications(root, base / "identification")
    written += _claim5(root, base / "data_efficiency")
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=("kind", "pack", "where"))
    parser.add_argument("stage", nargs="?", help="kind: the stage about to run")
    parser.add_argument("--new-kind", action="store_true", help="kind: restart the stage's group on this kind")
    parser.add_argument("--unplanned-kind", action="store_true",
                        help="kind: let the amendment's first stage run on a kind other than the planned one")
    parser.add_argument("--root", default="/work/exp-outputs/claims_confirm", help="the stages' ROOT")
    parser.add_argument("--out", default=str(HERE.parent / "records"), help="records root (default: %(default)s)")
    args = parser.parse_args(argv)
    root, out = Path(args.root), Path(args.out)
    if args.action == "where":
        here, planned = this_machine(), planned_kind()
        print(f"this machine: {here}" + ("" if planned in (None, here) else
                                         f" (not the planned {planned}: {UNPLANNED_NOTE})"))
        return 0
    if args.action == "kind":
        if args.stage is None or not any(args.stage in s or args.stage == g for g, s in GROUPS.items()):
            print(f"error: kind: give a stage ({', '.join(s for g in GROUPS.values() for s in g)})", file=sys.stderr)
            return 2
        try:
            print(check_kind(args.stage, root, out, new_kind=args.new_kind, planned=planned_kind(),
                             unplanned=args.unplanned_kind))
        except SystemExit as stop:
            print(stop, file=sys.stderr)
            return 2
        return 0
    for path in pack(root, out):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
