"""Pack the finished points of the amended plan's stages (``claims_amended.sh``) into ``experiments/records/``.

    .venv/bin/python experiments/claims/pack_amended.py \\
        [--root /work/exp-outputs/claims_amended] [--out experiments/records]

- the unedited evaluation (``ROOT/baseline/<task>/``) as one baseline file in each study (``prune``,
  ``scale``, ``generalisation``), committed before the study's points run and paired with every point
  packed with it; an older baseline file of the study (fewer tasks then) is replaced unless a committed
  point is paired with it;
- claim 1 and 2 points -> ``prune``; claim 3 -> ``scale``; claim 6 (tasks, WikiText) -> ``generalisation``;
- claim 3's points each pair with an unedited evaluation made on their own kind of CPU (amendment of
  2026-12-07): ``ROOT/baseline``'s tasks where that kind of machine (its name and CPU kernel flags) evaluated
  them, else its own
  ``ROOT/baseline_cpu/<machine>/<task>/`` (``claims_amended.sh claim3`` makes it first); a point whose
  machine has no such evaluation of one of its tasks is not packed. The machine of a baseline task is
  its ``metrics.json``'s ``hardware``, else ``<out>/amended_baseline_raw/hardware_noted.json``;
- every identification with a saved selection at K = 15 % and N = 100 (claim 4's RACE draws, claim 1's MMLU
  draws) as a header-only record in ``identification`` (M's size and its spread over blocks);
- M's overlap across draws at N = 1, 10 and 100 (claim 5's stage; claim 1's selections stand in for a draw at
  N = 100 it lacks) as the table
  ``data_efficiency/amended_mmlu``, and as per-matrix ``overlap`` records of every pair of draws
  (``data_efficiency/overlap__*``, :mod:`claimslib.overlap_records`), from which claims.py rebuilds claim 5.

Only complete points are packed, and packing is deterministic, so rerunning it after more points
finish only adds (or, for the baseline, replaces) files.
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import re
import sys
from pathlib import Path

from claimslib.overlap_records import write_pairs
from claimslib.records import (
    SELECTION_KEPT,
    SUFFIX,
    machine_labels,
    pack_baseline,
    pack_sweep,
    pack_table,
    point_name,
    read_study,
    write_packed,
)

from mathneuro.models.devices import cpu_hardware, machine_kind
from mathneuro.report.efficiency import efficiency_table, write_efficiency_csv
from mathneuro.report.point_records import point_records
from mathneuro.report.sweep import load_results

HERE = Path(__file__).resolve().parent
MODEL = "qwen2_5_coder_1_5b"
STUDIES = {"prune": ("claim1", "claim2"), "scale": ("claim3",), "generalisation": ("claim6/tasks", "claim6/wikitext")}
SAME_MACHINE = {"scale"}  # studies whose points pair with an unedited evaluation made on their kind of CPU
NOTED = Path("amended_baseline_raw") / "hardware_noted.json"  # under the records folder
CPU_BASELINES = "baseline_cpu"


def machine_slug(name: str) -> str:
    """A folder name for a kind of machine: ``Intel(R) Xeon(R) (amx_bf16)`` -> ``intel_r_xeon_r_amx_bf16``."""
    return re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_") or "unknown"


def noted_hardware(records: Path) -> dict[str, dict]:
    """Where the baseline tasks whose ``metrics.json`` predates the hardware field were evaluated, as the
    sittings that ran them noted it (``{task: hardware}``, in ``records/`` :data:`NOTED`)."""
    path = records / NOTED
    return json.loads(path.read_text()) if path.is_file() else {}


def _machine_of(folder: Path, noted: dict[str, dict]) -> str | None:
    """The kind of machine that made a baseline task (:func:`machine_kind`: its name and CPU kernel flags)."""
    try:
        hardware = json.loads((folder / "metrics.json").read_text()).get("hardware")
    except (OSError, ValueError):
        return None
    return machine_kind(hardware or noted.get(folder.name))


def baselines_by_machine(root: Path, noted: dict[str, dict]) -> dict[str, dict[str, Path]]:
    """``{machine: {task: folder}}``: the unedited evaluation's finished tasks by the machine that made
    them, ``ROOT/baseline``'s first, then each machine's own under ``ROOT/baseline_cpu/`` in their place."""
    out: dict[str, dict[str, Path]] = {}
    folders = [d for d in sorted((root / "baseline").glob("*")) if d.is_dir()]
    folders += [d for d in sorted((root / CPU_BASELINES).glob("*/*")) if d.is_dir()]
    for folder in folders:
        machine = _machine_of(folder, noted)
        if machine is not None:
            out.setdefault(machine, {})[folder.name] = folder
    return out


def _point_machine(result: dict) -> str | None:
    return machine_kind(result.get("hardware"))


def _pack_by_machine(root: Path, folder: Path, study: str, sources: list[Path], main: Path | None,
                     main_dirs: dict[str, Path], noted: dict[str, dict]) -> list[Path]:
    """A same-machine study's points, each paired with the unedited evaluation of its own kind of CPU
    (``main``: the study's packed baseline, made of ``main_dirs``)."""
    by_machine = baselines_by_machine(root, noted)
    written: list[Path] = []
    results = []
    for result in (r for s in sources for r in load_results(s)[0]):
        if result.get("computed_elsewhere"):  # resumed across machines: its tasks carry two machines' rounding
            print(f"{study}: point {result.get('point')} not packed: {', '.join(sorted(result['computed_elsewhere']))} "
                  f"computed on another kind of CPU than {_point_machine(result)} (computed_elsewhere); run it again "
                  "on one kind", file=sys.stderr)
        else:
            results.append(result)
    for machine in sorted({str(_point_machine(r)) for r in results}):
        mine = [r for r in results if str(_point_machine(r)) == machine]
        dirs = by_machine.get(machine, {})
        needed = sorted({t for r in mine if (recs := point_records(r)) is not None for t in recs.tasks})
        # a group's subtasks (mmlu_anatomy, minerva_math_algebra) are in its folder, beside the pooled group file
        within = {p.stem for d in dirs.values() for p in d.glob("*.jsonl")}
        missing = [t for t in needed if t not in dirs and t not in within]
        needed = [t for t in needed if t in dirs]
        if missing:
            print(f"{study}: {len(mine)} point(s) computed on {machine} not packed: no unedited evaluation of "
                  f"{', '.join(missing)} made on that kind of CPU (claims_amended.sh claim3 makes it first)",
                  file=sys.stderr)
            continue
        if main is not None and all(dirs[t] == main_dirs.get(t) for t in needed):
            base = main  # ROOT/baseline's own tasks were made there: the study's baseline is theirs
        else:
            base = pack_baseline({t: dirs[t] for t in needed}, folder, study=study, model=MODEL, noted_hardware=noted)
            written.append(base)
        written += pack_sweep(sources, folder, study=study, baseline=base.name[: -len(SUFFIX)],
                              include=lambda r, m=machine: (str(_point_machine(r)) == m
                                                            and not r.get("computed_elsewhere")))
    return written


def _complete(root: Path, folder: str) -> list[dict]:
    path = root / folder
    return load_results(path)[0] if path.is_dir() else []


def pack(root: Path, out: Path, *, table: bool = True) -> list[Path]:
    """Every file written (see the module docstring); ``table=False`` leaves claim 5's table as it is
    (its overlaps read every saved selection: minutes)."""
    written: list[Path] = []
    task_dirs = {d.name: d for d in sorted((root / "baseline").glob("*")) if d.is_dir()}
    noted = noted_hardware(out)
    for study, sweeps in STUDIES.items():
        folder = out / study
        sources = [root / s for s in sweeps if (root / s).is_dir() and _complete(root, s)]
        if not task_dirs and not sources:
            continue
        folder.mkdir(parents=True, exist_ok=True)
        old = set(folder.glob(f"baseline-*{SUFFIX}"))
        base = pack_baseline(task_dirs, folder, study=study, model=MODEL,  # committed before the study's points
                             noted_hardware=noted)
        if base is not None:
            written.append(base)
            referenced = _referenced_baselines(folder)
            for stale in old - {base}:
                if stale.name[: -len(SUFFIX)] not in referenced:  # a committed point pairs with it: it stays
                    stale.unlink()
        if sources and study in SAME_MACHINE:
            written += _pack_by_machine(root, folder, study, sources, base, task_dirs, noted)
        elif sources:
            written += pack_sweep(sources, folder, study=study, baseline=base.name[: -len(SUFFIX)] if base else None)
    written += _identifications(root, out / "identification")
    found = _efficiency(root, out / "data_efficiency") if table else None
    if found is not None:
        written.append(found)
    return written


def _referenced_baselines(folder: Path) -> set[str]:
    """The baselines the packed points of a study folder are paired with (their headers' ``baseline``)."""
    return {str(p.header.get("baseline")) for p in read_study(folder)
            if p.kind == "point" and p.header.get("baseline")}


def _identifications(root: Path, folder: Path) -> list[Path]:
    """Header-only records of M at K = 15 %, N = 100 (claim 4)."""
    written = []
    for result in [*_complete(root, "claim4"), *_complete(root, "claim1")]:
        point = result.get("point") or {}
        if point.get("method") != "mathneuro" or not math.isclose(float(point.get("top_k") or 0), 0.15):
            continue
        if not (Path(str(result["_dir"])) / "selection.safetensors").is_file() and not result.get("selection"):
            continue
        name = point_name(point)
        selection = {k: v for k, v in (result.get("selection") or {}).items() if k in SELECTION_KEPT}
        header = {"kind": "point", "study": "identification", "name": name, "point": point, "selection": selection,
                  "method_facts": result.get("method_facts"), "source": str(result.get("_job")),
                  **{k: result[k] for k in ("hardware", "provenance") if result.get(k)}}
        header.update(machine_labels(header))  # its kind of machine, named in the header
        folder.mkdir(parents=True, exist_ok=True)
        if (folder / f"{name}{SUFFIX}").exists():  # the first computation stays (bf16 rounding differs by machine)
            continue
        written.append(write_packed(folder / f"{name}{SUFFIX}", header, []))
    return written


def _efficiency(root: Path, folder: Path) -> Path | None:
    """Claim 5's table: M's overlap across draws 0-2 at N = 1, 10, 100 (MMLU filter, K = 15 %)."""
    results, seen = [], set()
    for r in (*_complete(root, "claim5"), *_complete(root, "claim1")):  # claim 5's own N = 100 first, else claim 1's
        point = r.get("point") or {}
        draw = (int(point.get("num_samples") or 0), point.get("seed"))
        if point.get("method") == "mathneuro" and point.get("filter", "mmlu") == "mmlu" and draw not in seen:
            seen.add(draw)
            results.append(r)
    if not any(int((r.get("point") or {}).get("num_samples") or 0) == 100 for r in results):
        print("claim 5: not packed yet (its N = 100 reference is claim 1's points, none finished)", file=sys.stderr)
        return None
    write_pairs(results, folder)  # claim 5's per-matrix overlap records, from which claims.py rebuilds it
    rows = [r for r in efficiency_table(results, reference_samples=100) if r.get("filter") == "mmlu"]
    if not rows:
        return None
    csv_path = root / "claim5" / "data_efficiency.csv"
    write_efficiency_csv(rows, csv_path)
    return pack_table(csv_path, folder, study="data_efficiency", name="amended_mmlu")


def this_machine() -> str:
    """This machine's kind (:func:`machine_kind`) as a run with ``model.device=auto`` records it."""
    import torch

    if torch.cuda.is_available():
        return torch.cuda.get_device_name(0)
    return str(machine_kind(cpu_hardware()))


def own_baseline_dir(root: Path, tasks: list[str], records: Path, machine: str | None = None) -> Path | None:
    """Where this machine's own unedited evaluation of ``tasks`` goes (``ROOT/baseline_cpu/<machine>``), or None
    when ``ROOT/baseline`` made every one of them on this kind of machine."""
    machine = machine or this_machine()
    noted = noted_hardware(records)
    main = {d.name: _machine_of(d, noted) for d in (root / "baseline").glob("*") if d.is_dir()}
    if all(main.get(t) == machine for t in tasks):
        return None
    return root / CPU_BASELINES / machine_slug(machine)


def packed_methods(records: Path, study: str, filter_: str, seed: int, task: str) -> set[str]:
    """The methods with a packed point of ``study`` at that filter and draw whose records hold ``task``
    (``-``: any point, e.g. an identification's header-only record); headers only are read."""
    found = set()
    for path in sorted((records / study).glob(f"*{SUFFIX}")):
        with gzip.open(path, "rt", encoding="utf-8") as fh:
            header = json.loads(fh.readline() or "{}")
        point = header.get("point") or {}
        if (header.get("kind") == "point" and str(point.get("filter")) == filter_ and point.get("seed") == seed
                and (task == "-" or task in (header.get("tasks") or {}))):
            found.add(str(point.get("method")))
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", default="/work/exp-outputs/claims_amended", help="the stages' ROOT")
    parser.add_argument("--out", default=str(HERE.parent / "records"), help="records root (default: %(default)s)")
    parser.add_argument("--no-table", action="store_true", help="leave claim 5's table as it is (it takes minutes)")
    parser.add_argument("--own-baseline-dir", nargs="+", metavar="TASK",
                        help="print where this machine's own unedited evaluation of TASK... goes, or nothing when "
                             "ROOT/baseline made them all on this kind of machine; pack nothing")
    parser.add_argument("--unpacked", nargs="+", metavar="ARG",
                        help="STUDY FILTER SEED TASK METHOD...: print the methods (comma-joined) without a packed "
                             "point of STUDY at that filter and seed whose records hold TASK (- for any); pack nothing")
    args = parser.parse_args(argv)
    root = Path(args.root)
    if args.unpacked:
        if len(args.unpacked) < 5:
            parser.error("--unpacked takes STUDY FILTER SEED TASK METHOD...")
        study, filter_, seed, task, *methods = args.unpacked
        done = packed_methods(Path(args.out), study, filter_, int(seed), task)
        print(",".join(m for m in methods if m not in done))
        return 0
    if args.own_baseline_dir:
        folder = own_baseline_dir(root, args.own_baseline_dir, Path(args.out))
        print(folder if folder is not None else "")
        return 0
    if not root.is_dir():
        print(f"error: no such folder: {root}", file=sys.stderr)
        return 2
    written = pack(root, Path(args.out), table=not args.no_table)
    for path in written:
        print(f"wrote {path}")
    print(f"{len(written)} file(s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
