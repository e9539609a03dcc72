"""The one line a sweep ends with: how many points completed, were skipped as already done, or failed.

A point counts as *complete* when its folder holds a complete ``results.json`` written since the sweep
started, *skipped* when that file is older (an earlier run of the same sweep did it), *running* when
it has none but another process holds its running claim now (a second worker on the same sweep
folder), and *failed* otherwise. The failed and running points' folders and the report's path are named.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path

from mathneuro.results.schema import RESULTS_FILE, read_complete_results
from mathneuro.util.locking import FileLock

_SKIP = {".hydra", "wandb", "report", "samples", "baseline_samples", "model", "__pycache__"}


def job_dirs(sweep_dir: str | os.PathLike) -> list[Path]:
    """Every point folder of a sweep: a folder (below the sweep folder) holding ``.hydra/`` or ``results.json``."""
    found = []
    for root, dirs, _files in os.walk(sweep_dir):
        dirs[:] = sorted(d for d in dirs if d not in _SKIP and not d.startswith("."))
        here = Path(root)
        if here != Path(sweep_dir) and ((here / ".hydra").is_dir() or (here / RESULTS_FILE).is_file()):
            found.append(here)
    return found


def _running_elsewhere(job: Path) -> bool:
    from mathneuro.pipeline.runner import RUNNING_LOCK, RUNNING_STALE_AFTER  # deferred: the runner's stack

    return FileLock(job / RUNNING_LOCK, stale_after=RUNNING_STALE_AFTER).held_elsewhere() is not None


def sweep_counts(sweep_dir: str | os.PathLike, started: float | None) -> dict[str, list[Path]]:
    """``{"complete", "skipped", "running", "failed"}``: the point folders of each kind (see the module
    docstring)."""
    out: dict[str, list[Path]] = {"complete": [], "skipped": [], "running": [], "failed": []}
    for job in job_dirs(sweep_dir):
        if read_complete_results(job) is None:
            out["running" if _running_elsewhere(job) else "failed"].append(job)
        elif started is not None and (job / RESULTS_FILE).stat().st_mtime < started:
            out["skipped"].append(job)
        else:
            out["complete"].append(job)
    return out


def status_line(sweep_dir: str | os.PathLike, started: float | None, report: str | os.PathLike | None,
                not_made: Sequence[str] = ()) -> str:
    """``sweep <dir>: 3 point(s) complete, 1 already done, 1 failed (<folder>); 2 comparison(s) not made
    (prompts differ: 2); report: <path>``, or ``sweep <dir>: 8 point(s) already done, nothing to run; ...``
    when an earlier run did every point. ``not_made``: the report's comparisons not made
    (:mod:`mathneuro.report.not_made`), counted by reason."""
    counts = sweep_counts(sweep_dir, started)
    failed, done = counts["failed"], counts["skipped"]
    if done and not (counts["complete"] or failed or counts["running"]):
        line = f"sweep {sweep_dir}: {len(done)} point(s) already done, nothing to run"
    else:
        line = (f"sweep {sweep_dir}: {len(counts['complete'])} point(s) complete, {len(done)} already done, "
                f"{len(failed)} failed")
    if failed:
        line += f" ({', '.join(str(p) for p in failed)})"
    if counts["running"]:
        line += (f", {len(counts['running'])} running in another process "
                 f"({', '.join(str(p) for p in counts['running'])})")
    if not_made:
        from mathneuro.report.not_made import count_text  # deferred: the report package loads matplotlib

        counted = count_text(not_made)
        line += f"; {counted}, listed above" if counted else ""
    return line + (f"; report: {report}" if report else "; no report written")


def failed_sweep_line(sweep_dir: str | os.PathLike, started: float | None) -> str:
    """The status line of a sweep that a point's error ended (Hydra then skips the end-of-sweep callbacks):
    the report of the points that completed is written first, so the line can name it."""
    report, notes = None, []
    try:
        from mathneuro.report import write_report  # deferred: matplotlib, only when a sweep failed

        written = write_report(sweep_dir)
        report, notes = Path(written["markdown"]).parent, written.get("paired_notes") or []
    except Exception:  # noqa: BLE001 - the line still says what completed and what failed
        pass
    if notes:
        from mathneuro.report.not_made import asked, listing  # deferred: the report package loads matplotlib

        notes = asked(notes)  # a sweep without per-example records asked for no comparison
        if notes:
            print(listing(notes), file=sys.stderr)
    return status_line(sweep_dir, started, report, notes)
