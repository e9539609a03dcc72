"""A point under file-system faults, on real file systems (issue 39): a full disk (a small tmpfs) or a
read-only mount ends with one line naming the path and exit 2 (the statistics cache warns and goes on),
leaves no partial file, and the next run completes with the same result; so does a point SIGKILLed at
any stage. The mounts need root: elsewhere these tests skip."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from mathneuro.cli import report as report_cli
from mathneuro.pipeline.config import ConfigError
from mathneuro.pipeline.runner import run_point
from mathneuro.util.locking import FileLock

from .test_failures import error_line
from .test_runner import base_overrides, cli, compose_cfg

pytestmark = pytest.mark.integration  # mount and umount run as processes; the CLI tests start mathneuro


def _mount(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["mount", *args], capture_output=True, text=True)


@pytest.fixture
def mounts() -> Iterator[Callable[..., Path]]:
    """``mounts(path, size="64k")``: a tmpfs at ``path``; ``mounts(path, ro_of=src)``: ``src`` read-only at
    ``path``. Unmounted afterwards. Skips unless root can mount here."""
    if os.geteuid() != 0:
        pytest.skip("needs root to mount a tmpfs or a read-only bind mount")
    made: list[Path] = []

    def mount(path: Path, size: str | None = None, ro_of: Path | None = None) -> Path:
        path.mkdir(parents=True, exist_ok=True)
        if ro_of is not None:
            res = _mount("--bind", str(ro_of), str(path))
            if res.returncode == 0:
                made.append(path)
                res = _mount("-o", "remount,ro,bind", str(path))
        else:
            res = _mount("-t", "tmpfs", "-o", f"size={size or '64k'},mode=755", "tmpfs", str(path))
            if res.returncode == 0:
                made.append(path)
        if res.returncode != 0:
            pytest.skip(f"mount refused here: {res.stderr.strip()}")
        return path

    yield mount
    for path in reversed(made):
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


def _resize(path: Path, size: str) -> None:
    assert _mount("-o", f"remount,size={size}", str(path)).returncode == 0


def _leftovers(root: Path) -> list[str]:
    """Temp files, files that do not parse, and folders half-copied: what a clean failure never leaves."""
    bad = []
    for path in root.rglob("*"):
        name = path.name
        if ".tmp" in name or name.startswith(".write-test."):
            bad.append(f"temp: {path}")
        elif path.is_file() and path.suffix == ".json":
            try:
                json.loads(path.read_text())
            except ValueError:
                bad.append(f"unparsable: {path}")
        elif path.is_file() and path.suffix == ".jsonl":
            if any(line.strip() and not _parses(line) for line in path.read_text().splitlines()):
                bad.append(f"cut short: {path}")
    return bad


def _parses(line: str) -> bool:
    try:
        json.loads(line)
    except ValueError:
        return False
    return True


OVERRIDES = ["num_samples=4", "max_length=32", "logger=none", "eval=quick", "eval.tasks=[arith]",
             "eval.log_samples=true", "eval.arith.num_problems=6", "top_k=0.2", "save_selection=true"]


def _same(result: dict, reference: dict) -> None:
    for key in ("metrics", "baseline_metrics", "point"):
        assert result[key] == reference[key], key
    assert result["selection"]["num_selected"] == reference["selection"]["num_selected"]


def _records(run: Path) -> dict[str, str]:
    info = json.loads((run / "results.json").read_text())["samples"]
    base = (run / info["baseline_dir"]).resolve()
    return {f"{side}/{p.name}": p.read_text() for side, folder in (("edit", run / "samples"), ("base", base))
            for p in sorted(folder.glob("*.jsonl"))}


def test_a_full_disk_at_any_write_fails_cleanly_and_the_next_run_completes(tiny_dir: Path, tmp_path: Path,
                                                                         mounts) -> None:
    ref_sweep = tmp_path / "ref"
    cfg = OmegaConf.to_object(compose_cfg([*base_overrides(tiny_dir, tmp_path / "ref-cache"), *OVERRIDES]))
    reference = run_point(cfg, ref_sweep / "p", sweep_dir=ref_sweep)
    failures: dict[int, str] = {}
    for pages in range(2, 40, 2):  # the disk fills at a different write each time
        disk = mounts(tmp_path / f"disk{pages}", size=f"{4 * pages}k")
        cfg = OmegaConf.to_object(compose_cfg([*base_overrides(tiny_dir, disk / "cache"), *OVERRIDES]))
        try:
            run_point(cfg, disk / "sweep" / "p", sweep_dir=disk / "sweep")
        except (OSError, ConfigError) as exc:
            where = exc.filename if isinstance(exc, OSError) else str(exc)
            assert str(disk) in str(where), f"{pages} pages: {exc!r} names no path on the full disk"
            failures[pages] = f"{type(exc).__name__}: {where}"
        assert _leftovers(disk) == [], pages
        _resize(disk, "8m")
        again = run_point(cfg, disk / "sweep" / "p", sweep_dir=disk / "sweep")
        _same(again, reference)
        assert _records(disk / "sweep" / "p") == _records(ref_sweep / "p")
        if pages not in failures:
            break  # the point fits this disk whole: every smaller disk failed somewhere else
    assert len(failures) >= 4, failures  # the disk filled at several different writes


def test_a_read_only_cache_or_run_dir_is_refused_and_a_read_only_sweep_reports_elsewhere(
        tiny_dir: Path, tmp_path: Path, mounts, capsys) -> None:
    (tmp_path / "ro-src").mkdir()
    ro = mounts(tmp_path / "ro", ro_of=tmp_path / "ro-src")
    cfg = OmegaConf.to_object(compose_cfg([*base_overrides(tiny_dir, ro / "cache"), *OVERRIDES]))
    with pytest.raises(ConfigError, match=r"^cache_dir: cannot write to directory .*ro/cache.*Read-only file system"):
        run_point(cfg, tmp_path / "out")
    cfg = OmegaConf.to_object(compose_cfg([*base_overrides(tiny_dir, tmp_path / "cache"), *OVERRIDES]))
    with pytest.raises(ConfigError, match=r"^hydra.run.dir: cannot write to directory .*ro/run"):
        run_point(cfg, ro / "run")

    # an archived sweep, mounted read-only: the report names the folder and writes elsewhere with --out
    sweep = tmp_path / "ro-src" / "sweep"
    run_point(cfg, sweep / "p", sweep_dir=sweep)
    archived = ro / "sweep"
    capsys.readouterr()
    assert report_cli.main([str(archived)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(archived / "report") in err[0] and "--out" in err[0], err
    assert report_cli.main([str(archived), "--out", str(tmp_path / "report")]) == 0
    assert "baseline" in (tmp_path / "report" / "paired.csv").read_text()


@pytest.mark.e2e
def test_cli_on_a_full_disk_is_one_line_and_exit_2_then_a_rerun_completes(tiny_dir: Path, tmp_path: Path,
                                                                           mounts) -> None:
    disk = mounts(tmp_path / "disk", size="96k")  # Hydra's files fit; the exported model (~100 KB) does not
    args = [*base_overrides(tiny_dir, tmp_path / "cache"), "eval=none", "logger=none", "export_model=true",
            f"hydra.run.dir={disk / 'run'}"]
    res = cli(args, cwd=tmp_path)
    assert res.returncode == 2, res.stderr[-3000:]
    line = error_line(res)
    assert f"{disk / 'run'}" in line and "the disk is full" in line, line
    assert _leftovers(disk) == []
    assert not (disk / "run" / "model").exists() and not (disk / "run" / "results.json").exists()
    _resize(disk, "8m")
    res = cli(args, cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-3000:]
    assert (disk / "run" / "model" / "README.md").is_file() and (disk / "run" / "results.json").is_file()


def _fill(disk: Path) -> None:
    """Write zeros to ``disk`` until it is full."""
    fd = os.open(disk / "fill", os.O_WRONLY | os.O_CREAT)
    try:
        while os.write(fd, b"\0" * 4096):
            pass
    except OSError:
        pass
    finally:
        os.close(fd)


@pytest.mark.e2e
def test_hydras_own_writes_on_a_full_disk_are_one_line_naming_the_file_and_leave_nothing(
        tiny_dir: Path, tmp_path: Path, mounts) -> None:
    disk = mounts(tmp_path / "disk", size="64k")
    _fill(disk)
    args = [*base_overrides(tiny_dir, tmp_path / "cache"), "eval=none", "logger=none"]
    res = cli([*args, f"hydra.run.dir={disk / 'run'}"], cwd=tmp_path)  # Hydra's config snapshot, .hydra/
    assert res.returncode == 2, res.stderr[-3000:]
    line = error_line(res)
    assert line.startswith("mathneuro: error: hydra.run.dir: ") and str(disk / "run") in line, line
    assert "the disk is full" in line and "Error executing job" not in res.stderr, res.stderr[-3000:]
    res = cli(["-m", *args, "top_k=0.1,0.2", f"hydra.sweep.dir={disk / 'sweep'}"], cwd=tmp_path)  # multirun.yaml
    assert res.returncode == 2, res.stderr[-3000:]
    line = error_line(res)
    assert line.startswith("mathneuro: error: hydra.sweep.dir: ") and str(disk / "sweep") in line, line
    assert sorted(p.name for p in disk.iterdir()) == ["fill"]  # no half-written snapshot, no empty folder


@pytest.mark.e2e
def test_a_run_or_sweep_dir_below_a_file_and_a_log_on_a_full_disk_are_one_line(tiny_dir: Path, tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"  # root writes anywhere: a path below a regular file stops it too (ENOTDIR)
    blocker.write_text("not a folder")
    args = [*base_overrides(tiny_dir, tmp_path / "cache"), "eval=none", "logger=none"]
    res = cli(["-m", *args, "top_k=0.1,0.2", f"hydra.sweep.dir={blocker / 'sweep'}"], cwd=tmp_path)
    assert res.returncode == 2, res.stderr[-3000:]
    line = error_line(res)
    assert line.startswith(f"mathneuro: error: hydra.sweep.dir: cannot write '{blocker / 'sweep'}") and \
        "not a folder" in line, line
    if not Path("/dev/full").exists():
        pytest.skip("no /dev/full here to stand for a full disk under the log")
    run = tmp_path / "run"  # the log file on a full disk: every write to /dev/full fails with ENOSPC
    res = cli([*args, f"hydra.run.dir={run}", "hydra.job_logging.handlers.file.filename=/dev/full"], cwd=tmp_path)
    assert res.returncode == 2, res.stderr[-3000:]
    line = error_line(res)
    assert line.startswith("mathneuro: error: /dev/full: the disk is full") and "Error executing job" not in res.stderr
    assert not (run / "results.json").exists()


def test_a_data_file_with_a_byte_that_is_not_utf8_is_one_line_naming_the_file_and_line(tiny_dir: Path,
                                                                                         tmp_path: Path) -> None:
    data = tmp_path / "math.jsonl"
    lines = [json.dumps({"question": f"{i} + {i}?", "answer": str(2 * i)}).encode() for i in range(30)]
    lines[16] = b'{"question": "caf\xe9 au lait: 3 + 4?", "answer": "7"}'
    data.write_bytes(b"\n".join(lines) + b"\n")
    res = cli([*base_overrides(tiny_dir, tmp_path / "cache"), "eval=none", f"task.path={data}",
               f"hydra.run.dir={tmp_path / 'run'}"], cwd=tmp_path)
    assert res.returncode == 2, res.stderr[-3000:]
    line = error_line(res)
    assert line.startswith(f"mathneuro: error: task.path: {data}:17: not UTF-8 text (byte 0xe9 at column 18)"), line
    assert not (tmp_path / "run").exists()  # refused before any work: no run folder, no W&B run


# ------------------------------------------------------------------------------------------- SIGKILL
KILL_AT = {  # stage -> what on disk says the point is in it
    "statistics pass": lambda cache, run: any((cache / "statistics" / "partial").glob("*.safetensors")),
    "statistics stored": lambda cache, run: any((cache / "statistics").glob("*.json")),
    "baseline evaluation": lambda cache, run: any((cache / "statistics" / "baselines").glob("*.tasks/*.json")),
    "edited evaluation": lambda cache, run: any((run / ".partial").glob("*/*.json")),
    "records written": lambda cache, run: (run / "samples").is_dir(),
}


@pytest.mark.e2e
def test_a_point_sigkilled_at_any_stage_is_completed_by_the_next_run_with_the_same_result(
        tiny_dir: Path, tmp_path: Path) -> None:
    overrides = ["num_samples=48", "batch_size=2", "max_length=64", "checkpoint_every_s=0", "logger=none",
                 "eval=quick", "eval.tasks=[arith,mc]", "eval.log_samples=true", "eval.arith.num_problems=24"]
    cfg = OmegaConf.to_object(compose_cfg([*base_overrides(tiny_dir, tmp_path / "ref-cache"), *overrides]))
    reference = run_point(cfg, tmp_path / "ref" / "p", sweep_dir=tmp_path / "ref")
    cache, run = tmp_path / "cache", tmp_path / "sweep" / "p"
    args = [*base_overrides(tiny_dir, cache), *overrides, f"hydra.run.dir={run}"]
    env = {**os.environ, "WANDB_MODE": "offline", "HYDRA_FULL_ERROR": "0"}
    killed = []
    for stage, reached in KILL_AT.items():
        proc = subprocess.Popen([sys.executable, "-m", "mathneuro", *args], cwd=tmp_path, env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        while proc.poll() is None and not reached(cache, run):
            time.sleep(0.005)
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            killed.append(stage)
        proc.wait(60)
        if (run / "results.json").exists():
            break
    assert len(killed) >= 3, killed  # most stages were reached and killed in (a fast machine may skip one)
    res = cli(args, cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-3000:]
    result = json.loads((run / "results.json").read_text())
    _same(result, reference)
    assert _records(run) == _records(tmp_path / "ref" / "p")
    assert _leftovers(run) == [] and _leftovers(cache) == [] and not (run / ".partial").exists()
    # a lock whose killed holder had stored its entry stays (no later run needs that lock), but it holds
    # nothing: its holder is gone, so the next waiter takes it over at once
    for lock in (cache / "statistics" / "locks").glob("*.lock"):
        assert FileLock(lock).held_elsewhere() is None, lock.read_text()
