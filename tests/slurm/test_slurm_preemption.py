"""Preemption and timeouts on a real SLURM cluster: a point whose job is requeued or times out mid-identification
and mid-evaluation comes back, resumes from what its earlier attempts finished (the statistics pass's
checkpoint, the evaluated tasks) and completes, leaving nothing partial; ``results.json`` counts its attempts.

The tests act at moments they can see: mid-identification is right after the pass's first checkpoint (one
per batch here, ``checkpoint_every_s=0``), in a pass sized to outlast the cluster's 1 s between SIGTERM and
SIGKILL even at this machine's quickest; mid-evaluation is while a gate probe (tests/slurm/gate.py) holds
the evaluation after its first task, mc, was kept.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from tests.slurm.gate import GATE_ENV
from tests.slurm.sweeps import (
    BATCH,
    finish,
    launcher_args,
    leftovers,
    lock_holders,
    samples_outlasting,
    start_sweep,
    wait_for,
)

pytestmark = pytest.mark.slurm
GATE_TASK = "tests.slurm.gate:gate"


def point_args(model_dir, cache, sweep, num_samples: int) -> list[str]:
    """One Wanda point (one statistics pass: Wanda uses no filter set) of the medium model, evaluated on mc
    and then the gate."""
    return [f"model.name_or_path={model_dir}", "model.name=medium", "model.dtype=float32", "model.device=cpu",
            f"cache_dir={cache}", f"num_samples={num_samples}", f"batch_size={BATCH}", "max_length=128",
            "progress=false", "logger=wandb", "method=wanda", "top_k=0.05", "checkpoint_every_s=0", "eval=quick",
            f"eval.tasks=[mc,{GATE_TASK}]", f"hydra.sweep.dir={sweep}"]


def running_job(cluster) -> str:
    """The id of the one job running on the cluster now."""
    running = [row[0] for row in cluster.squeue() if row[2] == "RUNNING"]
    assert len(running) == 1, cluster.squeue()
    return running[0]


def mid_identification(proc, cache: Path) -> None:
    """Return as soon as the statistics pass has saved its first checkpoint (one batch done)."""
    stats = cache / "statistics"
    wait_for("a statistics checkpoint", lambda: list((stats / "partial").glob("*.safetensors")), proc, 300, 0.02)
    assert all(h.get("slurm_job") for h in lock_holders(stats / "locks"))  # a lock names the SLURM job holding it


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def mid_evaluation(proc, gate: Path, cluster, job: str, restarts: int) -> int:
    """Wait until attempt ``restarts + 1`` of ``job`` runs and its evaluation is held at the gate (its first
    task, mc, kept); the pid of that attempt's process. An earlier attempt that reached the gate before SLURM
    killed it (a quick machine finishes the pass within KillWait) left an ``entered`` file of a dead pid."""
    wait_for(f"attempt {restarts + 1} of job {job}", lambda: cluster.running_attempt(job, restarts), proc, 300)

    def held() -> list[int]:
        return [pid for pid in (int(p.name.split("-")[1]) for p in gate.glob("entered-*")) if alive(pid)]

    return wait_for("the evaluation at the gate", held, proc, 600)[0]


def open_gate_once_gone(proc, gate: Path, pid: int) -> None:
    """Let the next attempt through the gate, once the attempt held there (process ``pid``) is gone."""
    wait_for(f"the end of process {pid}", lambda: not alive(pid), proc, 120)
    (gate / "open").touch()


def cut_twice(proc, cluster, cache: Path, gate: Path, tmp_path: Path, cut, kept) -> str:
    """Cut the point's job (``cut(job)``) mid-identification, then mid-evaluation once ``kept()`` shows its
    first task kept; let the third attempt through the gate and the sweep finish; the sweep's output."""
    try:
        mid_identification(proc, cache)
        job = running_job(cluster)
        cut(job)
        pid = mid_evaluation(proc, gate, cluster, job, 1)
        assert kept()
        cut(job)
        open_gate_once_gone(proc, gate, pid)
        out = finish(proc, tmp_path, 900)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, out[-4000:]
    return out


def check_resumed(results: dict, sweep: Path, cache: Path, tasks: str) -> None:
    """Completed by a third attempt that went on from where each of the two before it stopped."""
    assert results["status"] == "complete"
    assert results["attempts"] == 3 and results["cluster"]["restart_count"] == 2
    resumed = results["resumed"]
    [stats] = resumed["statistics"]
    assert stats["dataset"] == "embedded_math" and stats["attempt"] == 2 and stats["resumed_batches"] >= 1, resumed
    assert resumed[tasks] == ["mc"], resumed  # read back by attempt 3, not evaluated again
    assert {"nonmath/mc/acc", f"nonmath/{GATE_TASK}/passed"} <= set(results["metrics"])
    assert leftovers(sweep, cache) == []  # nothing partial
    runs = list(next(sweep.glob("*/results.json")).parent.glob("wandb/offline-run-*"))
    assert len(runs) == 3 and len({run.name.rsplit("-", 1)[1] for run in runs}) == 1  # 3 attempts, 1 W&B run


def test_a_point_requeued_mid_identification_and_mid_evaluation_resumes_and_completes(
        slurm_cluster, medium_model, fastest_batch_s, tmp_path):
    """``scontrol requeue``, as preemption does: SLURM sends SIGTERM (which asks the pass for a checkpoint;
    submitit lets the job run on), kills the job KillWait seconds later and requeues it. The edited model's
    evaluation is cut here (no baseline); the timeout test below cuts the baseline's."""
    sweep, cache, gate = tmp_path / "sweep", tmp_path / "cache", tmp_path / "gate"
    gate.mkdir()
    # SIGTERM lets the pass run on until SIGKILL: it must outlast KillWait and the test's own calls to squeue
    # and scontrol (slow on a loaded machine) with room to spare even where the load has just dropped: from the
    # first checkpoint to SIGKILL took about 4 s in one run here and over 6 s in a clean-clone CI run (whose pass
    # then finished unkilled, leaving nothing to resume)
    num_samples = samples_outlasting(20, fastest_batch_s, least_batches=64)
    proc = start_sweep(slurm_cluster, [*launcher_args(slurm_cluster.partition),
                                       *point_args(medium_model, cache, sweep, num_samples), "baseline=false"],
                       tmp_path, {GATE_ENV: str(gate)})
    start = time.monotonic()
    cut_twice(proc, slurm_cluster, cache, gate, tmp_path, slurm_cluster.requeue,
              lambda: list(sweep.glob("*/.partial/edited-*/*.json")))  # mc is kept
    results = json.loads(next(sweep.glob("*/results.json")).read_text())
    print(f"\nrequeue test: {num_samples} samples, {time.monotonic() - start:.0f} s, attempts {results['attempts']}, "
          f"SLURM requeues {results['cluster']['restart_count']}, resumed {results.get('resumed')}")
    check_resumed(results, sweep, cache, "edited_tasks")
    assert not results["baseline_metrics"]


def test_a_point_that_times_out_mid_identification_and_mid_evaluation_resumes_and_completes(
        slurm_cluster, medium_model, fastest_batch_s, tmp_path):
    """A timeout: SLURM sends USR2 ``signal_delay_s`` before the time limit; submitit's handler requeues the
    job (counting it against ``max_num_timeout``) and ends the attempt with SystemExit, on which the pass saves
    its finished batches. The test sends USR2 itself (``scancel --signal``, as SLURM's timer does, at moments
    it chooses), so the limit is set far off; SLURM's own timer: experiments/benchmarks/slurm_timeout_trial.py."""
    sweep, cache, gate = tmp_path / "sweep", tmp_path / "cache", tmp_path / "gate"
    gate.mkdir()
    num_samples = samples_outlasting(6, fastest_batch_s)
    proc = start_sweep(slurm_cluster, [
        *launcher_args(slurm_cluster.partition, timeout_min=10, signal_delay_s=60, max_num_timeout=3),
        *point_args(medium_model, cache, sweep, num_samples)], tmp_path, {GATE_ENV: str(gate)})
    start = time.monotonic()
    cut_twice(proc, slurm_cluster, cache, gate, tmp_path, lambda job: slurm_cluster.signal(job, "USR2"),
              lambda: list((cache / "statistics" / "baselines").glob("*.tasks/*.json")))  # the baseline's mc is kept
    results = json.loads(next(sweep.glob("*/results.json")).read_text())
    print(f"\ntimeout test: {num_samples} samples, {time.monotonic() - start:.0f} s, attempts {results['attempts']}, "
          f"SLURM requeues {results['cluster']['restart_count']}, resumed {results.get('resumed')}")
    errors = "".join(p.read_text() for p in (sweep / ".submitit").rglob("*_log.err"))
    assert errors.count("this job is timed-out") == 2  # submitit took each USR2 for a timeout ...
    out = "".join(p.read_text() for p in (sweep / ".submitit").rglob("*_log.out"))
    assert "(2 remaining timeouts)" in out and "(1 remaining timeouts)" in out  # ... and counted it
    check_resumed(results, sweep, cache, "baseline_tasks")
    assert set(results["baseline_metrics"]) == set(results["metrics"])
