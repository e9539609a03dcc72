"""Console scripts: ``mathneuro-report <sweep_dir>`` and ``mathneuro-overlap A.safetensors B.safetensors``."""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path

from mathneuro.methods.counts import (
    count_entries,
    count_selected,
    per_layer_counts,
    per_module_counts,
    sort_layer_keys,
)
from mathneuro.report import plot_overlap_heatmap, write_report
from mathneuro.report.inference import parse_family
from mathneuro.report.not_made import count_text, listing
from mathneuro.report.overlap import load_selection_file, overlap_matrix
from mathneuro.report.wandb_run import log_report_run, report_mode, sweep_logger
from mathneuro.util.io import write_text_atomic

EXIT_USAGE = 2


def _error(message: str) -> int:
    print(f"error: {message}", file=sys.stderr)
    return EXIT_USAGE


def main(argv: Sequence[str] | None = None) -> int:
    """``mathneuro-report``: write points.csv, summary.md and figures for a multirun directory."""
    parser = argparse.ArgumentParser(
        prog="mathneuro-report",
        description="Read every results.json of a sweep and write a CSV, a markdown summary and PNG figures.",
    )
    parser.add_argument("sweep_dir", help="the multirun directory (Hydra's sweep dir) or one run dir")
    parser.add_argument("--out", default=None, help="output directory (default: <sweep_dir>/report)")
    parser.add_argument("--metric", action="append", default=None,
                        help="metric to tabulate and plot, e.g. math/gsm8k/exact_match (repeatable; default: all)")
    parser.add_argument("--margin", type=float, default=None,
                        help="equivalence margin of paired.csv's verdicts, e.g. 0.03 (+-3 points of accuracy)")
    parser.add_argument("--family", action="append", default=[],
                        help="a named family of paired rows whose decisions are Holm-adjusted: NAME or "
                             "NAME:key=value[|value][,key=value], e.g. as_random:reference=random,side=nonmath "
                             "(repeatable; a row joins the first family it matches)")
    parser.add_argument("--wandb-project", default=None,
                        help="also log figures, tables and paired differences to this W&B project, into the "
                             "sweep's one report run (resumed: same id and group as the sweep's points)")
    parser.add_argument("--wandb-mode", default=None, choices=["online", "offline", "disabled"],
                        help="W&B mode for --wandb-project (default: the sweep's own logger.mode, else offline)")
    args = parser.parse_args(argv)


    sweep = Path(args.sweep_dir)
    if not sweep.is_dir():
        return _error(f"no such directory: {sweep}")
    if args.margin is not None and not args.margin > 0:
        return _error(f"--margin: must be > 0, got {args.margin}")
    try:
        for spec in args.family:
            parse_family(spec)
    except ValueError as err:
        return _error(f"--family: {err}")
    try:
        report = write_report(sweep, args.out, metrics=args.metric, margin=args.margin, families=args.family)
    except (FileNotFoundError, ValueError) as err:
        return _error(str(err))
    except OSError as err:  # a read-only archive, a full disk, no permission
        where = err.filename or args.out or sweep / "report"
        return _error(f"{where}: cannot write the report ({err.strerror or err}); write it elsewhere with --out DIR")
    counted = count_text(report.get("paired_notes") or [])
    print(f"{len(report['rows'])} complete point(s), {len(report['missing'])} missing or incomplete"
          + (f"; {counted}, listed below" if counted else ""))
    for entry in report["missing"]:
        print(f"  missing: {entry['job']}: {entry['reason']}")
    print(f"wrote {report['csv']}")
    print(f"wrote {report['markdown']}")
    if report.get("paired_csv"):
        print(f"wrote {report['paired_csv']}")
    for path in report["figures"].values():
        print(f"wrote {path}")
    if report.get("paired_notes"):  # last, and in summary.md's last section
        print(listing(report["paired_notes"]))
    if args.wandb_project:  # the sweep's own report run (same id and group), resumed
        return _log_to_wandb(report, sweep.resolve(), args.wandb_project, args.wandb_mode)
    return 0


def _log_to_wandb(report: dict, sweep: Path, project: str, mode: str | None) -> int:
    """Log the report to the sweep's W&B report run, in the sweep's own mode unless ``mode`` is given, and
    say where it went; W&B's warnings are one line each (no Python source lines)."""
    logger = {**sweep_logger(sweep), "project": project, "mode": report_mode(sweep, mode)}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        told = log_report_run(report, sweep, logger)
    for warning in caught:
        print(f"warning: {' '.join(str(warning.message).split())}", file=sys.stderr)
    if told is None:
        print("warning: the W&B report run could not start; nothing logged to W&B", file=sys.stderr)
    else:
        print(f"W&B report run: {told}")
    return 0


def _labels(paths: Sequence[Path]) -> list[str]:
    stems = [p.stem for p in paths]
    if len(set(stems)) == len(stems):
        return stems
    parents = [f"{p.parent.name}/{p.stem}" for p in paths]
    return parents if len(set(parents)) == len(parents) else [str(p) for p in paths]


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.4f}"


def _print_sizes(labels: Sequence[str], numbers: dict) -> None:
    """Each selection's size: selected weights as a share of its mask entries, and its neurons."""
    print("selections:")
    for label in labels:
        size, total, n_w = numbers["sizes"][label], numbers["mask_entries"][label], numbers["selected_weights"][label]
        parts = []
        if total:
            parts.append(f"{n_w} weights = {n_w / total:.4%} of {total} mask entries")
        if size - n_w:
            parts.append(f"{size - n_w} neurons")
        print(f"  {label}: {size} selected" + (f" ({', '.join(parts)})" if parts else ""))


def _print_overlaps(labels: Sequence[str], numbers: dict) -> None:
    """The sizes, the pairwise overlaps (two or more selections) and the per-layer counts, as tables."""
    _print_sizes(labels, numbers)
    if numbers["pairs"]:
        print("\npairwise overlap:")
        head = f"{'A':<24} {'B':<24} {'|A|':>10} {'|B|':>10} {'|A∩B|':>10} {'Jaccard':>8} {'A in B':>8} {'B in A':>8}"
        print(head)
        for p in numbers["pairs"]:
            print(f"{p['a']:<24} {p['b']:<24} {p['size_a']:>10} {p['size_b']:>10} {p['intersection']:>10} "
                  f"{_fmt(p['jaccard']):>8} {_fmt(p['a_in_b']):>8} {_fmt(p['b_in_a']):>8}")
    print("\nper-layer counts:")
    layers = numbers["per_layer"]
    keys = sort_layer_keys({k for counts in layers.values() for k in counts})
    print(f"{'layer':<8} " + " ".join(f"{label:>14}" for label in labels))
    for key in keys:
        print(f"{key:<8} " + " ".join(f"{layers[label].get(key, 0):>14}" for label in labels))


def _overlap_numbers(labels: Sequence[str], paths: Sequence[Path]) -> tuple[dict, dict]:
    """The overlap matrix of the selections in ``paths`` and every number ``--json`` writes about them."""
    selections = {label: load_selection_file(path) for label, path in zip(labels, paths, strict=True)}
    matrix = overlap_matrix(selections)
    numbers = {
        "files": {label: str(path) for label, path in zip(labels, paths, strict=True)},
        "metadata": {label: dict(getattr(sel, "metadata", {})) for label, sel in selections.items()},
        "sizes": matrix["sizes"],
        "mask_entries": {label: count_entries(sel) for label, sel in selections.items()},
        "selected_weights": {label: count_selected(sel, kind="weights") for label, sel in selections.items()},
        "per_layer": {label: per_layer_counts(sel) for label, sel in selections.items()},
        "per_module": {label: per_module_counts(sel) for label, sel in selections.items()},
        "matrix": {k: matrix[k] for k in ("labels", "intersection", "jaccard", "a_in_b")},
        "pairs": matrix["pairs"],
    }
    return matrix, numbers


def overlap_main(argv: Sequence[str] | None = None) -> int:
    """``mathneuro-overlap``: pairwise overlap (Jaccard, A in B) and per-layer counts of saved selections."""
    parser = argparse.ArgumentParser(
        prog="mathneuro-overlap",
        description="Compare saved selections (selection.safetensors): pairwise overlap and per-layer counts.",
    )
    parser.add_argument("files", nargs="+", help="selection.safetensors files (two or more for overlaps)")
    parser.add_argument("--json", default=None, help="also write all numbers to this JSON file")
    parser.add_argument("--png", default=None, help="also write a Jaccard heatmap to this PNG")
    args = parser.parse_args(argv)
    paths = [Path(f) for f in args.files]
    for path in paths:
        if not path.is_file():
            return _error(f"no such file: {path}")
    labels = _labels(paths)
    try:
        matrix, numbers = _overlap_numbers(labels, paths)
    except (OSError, ValueError, RuntimeError) as err:
        return _error(f"could not read selections: {err}")
    _print_overlaps(labels, numbers)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(args.json, json.dumps(numbers, indent=2))
        print(f"\nwrote {args.json}")
    if args.png:
        print(f"wrote {plot_overlap_heatmap(matrix, args.png)}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
