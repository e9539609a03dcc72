"""The one line a sweep ends with: complete, skipped as already done, failed (with folders), the report's path."""

from __future__ import annotations

import json
import os
import sys
import textwrap
import time
from pathlib import Path

import pytest

from mathneuro.cli.sweep_status import status_line, sweep_counts
from tests.test_runner import base_overrides, cli


def job(sweep: Path, name: str, status: str | None, age: float = 0.0) -> Path:
    folder = sweep / name
    (folder / ".hydra").mkdir(parents=True)
    if status is not None:
        path = folder / "results.json"
        path.write_text(json.dumps({"status": status, "point": {}, "metrics": {}}))
        os.utime(path, (time.time() - age, time.time() - age))
    return folder


def test_points_are_counted_by_what_their_folders_hold(tmp_path: Path) -> None:
    done = job(tmp_path, "a", "complete")
    old = job(tmp_path, "b", "complete", age=3600)
    broken = job(tmp_path, "c", "running")
    empty = job(tmp_path, "d", None)
    (tmp_path / "report").mkdir()
    counts = sweep_counts(tmp_path, started=time.time() - 60)
    assert counts == {"complete": [done], "skipped": [old], "running": [], "failed": [broken, empty]}
    line = status_line(tmp_path, time.time() - 60, tmp_path / "report")
    assert line == (f"sweep {tmp_path}: 1 point(s) complete, 1 already done, 2 failed ({broken}, {empty}); "
                    f"report: {tmp_path / 'report'}")


def test_a_point_another_process_is_running_is_running_not_failed(tmp_path: Path) -> None:
    from mathneuro.pipeline.runner import RUNNING_LOCK, RUNNING_STALE_AFTER
    from mathneuro.util.locking import FileLock

    done = job(tmp_path, "a", "complete")
    busy = job(tmp_path, "b", None)  # a second worker on the same sweep folder holds this point now
    with FileLock(busy / RUNNING_LOCK, stale_after=RUNNING_STALE_AFTER):
        counts = sweep_counts(tmp_path, started=time.time() - 60)
        line = status_line(tmp_path, time.time() - 60, None)
    assert counts == {"complete": [done], "skipped": [], "running": [busy], "failed": []}
    assert line == (f"sweep {tmp_path}: 1 point(s) complete, 0 already done, 0 failed, 1 running in "
                    f"another process ({busy}); no report written")
    assert sweep_counts(tmp_path, started=time.time() - 60)["failed"] == [busy]  # released without results


@pytest.mark.integration
def test_a_sweep_whose_point_fails_still_ends_with_the_line_and_a_report(tiny_dir, tmp_path: Path) -> None:
    plug = tmp_path / "plug"
    plug.mkdir()
    (plug / "boomprobe.py").write_text(textwrap.dedent("""
        from mathneuro.evaluation.probe_registry import register_probe

        @register_probe("boom", kind="math")
        def boom(ctx):
            if ctx.cfg.batch_size == 3:
                raise RuntimeError("boom")
            return {"acc": 1.0}
    """))
    sweep = tmp_path / "sweep"
    path = os.pathsep.join([str(plug), *[p for p in sys.path if p]])
    res = cli(["-m", *base_overrides(tiny_dir, tmp_path / "cache"), "eval.tasks=[boomprobe:boom]",
               "eval.batch_size=3,4", "baseline=false", "logger=none", f"hydra.sweep.dir={sweep}"],
              cwd=tmp_path, env={"PYTHONPATH": path})
    assert res.returncode != 0 and "RuntimeError: boom" in res.stderr
    (failed,) = [p for p in sweep.iterdir() if "eval.batch_size=3" in p.name]
    line = next(x for x in res.stderr.splitlines() if x.startswith("sweep "))
    assert line == (f"sweep {sweep}: 1 point(s) complete, 0 already done, 1 failed ({failed}); "
                    f"report: {sweep / 'report'}")
    assert (sweep / "report" / "points.csv").read_text().count("\n") == 2  # header + the complete point


def test_a_rerun_with_every_point_done_says_so(tmp_path: Path) -> None:
    job(tmp_path, "a", "complete", age=3600)
    job(tmp_path, "b", "complete", age=3600)
    line = status_line(tmp_path, time.time() - 60, None)
    assert line == f"sweep {tmp_path}: 2 point(s) already done, nothing to run; no report written"
