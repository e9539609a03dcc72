"""The cross-process lock file: exclusion, waiting, heartbeats, stale takeover; the cache waits on it."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time

import pytest

from mathneuro.models.tiny import tiny_model
from mathneuro.statistics.cache import StatisticsCache, cached_statistics
from mathneuro.statistics.passes import collect_statistics
from mathneuro.util import locking
from mathneuro.util.locking import FileLock, LockTimeout

from .conftest import TEXTS

IDENTITY = {"name": "tiny-llama", "dtype": "float32"}


def test_lock_file_records_holder_and_is_removed_on_release(tmp_path):
    path = tmp_path / "locks" / "k.lock"
    with FileLock(path) as lock:
        info = json.loads(path.read_text())
        assert info["pid"] == os.getpid() and info["host"] and info["token"] == lock.token
        assert not lock.waited and not lock.took_over
    assert not path.exists()


def test_second_holder_waits_while_heartbeat_keeps_a_long_hold_alive(tmp_path):
    path = tmp_path / "k.lock"
    holder = FileLock(path, stale_after=0.6, heartbeat=0.05).acquire()
    events = []

    def other():
        with FileLock(path, stale_after=0.6, poll=0.02) as lock:
            events.append(("acquired", time.monotonic(), lock.waited, lock.took_over))

    t = threading.Thread(target=other)
    t.start()
    time.sleep(1.5)  # longer than stale_after: only the heartbeat keeps the lock from being taken over
    assert not events
    released = time.monotonic()
    holder.release()
    t.join(5)
    (what, when, waited, took_over) = events[0]
    assert when >= released and waited and not took_over


@pytest.mark.integration
def test_lock_of_a_killed_process_on_this_host_is_taken_over_at_once(tmp_path):
    path = tmp_path / "k.lock"
    code = ("import os, sys; from mathneuro.util.locking import FileLock; "
            f"FileLock({str(path)!r}, stale_after=600, heartbeat=0.05).acquire(); os._exit(0)")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)  # exits holding the lock
    assert path.exists()
    assert FileLock(path, stale_after=600).held_elsewhere() is None  # a dead holder holds nothing
    lock = FileLock(path, stale_after=600, poll=0.02).acquire(timeout=0)  # no wait for the heartbeat
    assert lock.took_over and lock.waited
    assert json.loads(path.read_text())["token"] == lock.token
    lock.release()
    assert not path.exists() and not list(tmp_path.glob("k.lock.stale-*"))


def test_a_pid_reused_by_a_younger_process_does_not_keep_a_dead_holders_lock(tmp_path):
    path = tmp_path / "k.lock"
    info = {"host": socket.gethostname(), "boot": locking._boot_id(), "pid": os.getppid(),
            "time": 0.0, "token": "old"}  # taken at the epoch, by a pid that a later (live) process now has
    path.write_text(json.dumps(info))
    if locking._process_start_epoch(os.getppid()) is None:
        pytest.skip("no /proc to read process start times from")
    lock = FileLock(path, stale_after=600).acquire(timeout=0)
    assert lock.took_over
    lock.release()
    info["time"] = time.time()  # the same live pid, taken after it started: a live holder
    path.write_text(json.dumps(info))
    with pytest.raises(LockTimeout):
        FileLock(path, stale_after=600).acquire(timeout=0)


def test_lock_of_a_silent_holder_on_another_host_is_taken_over_after_the_timeout(tmp_path):
    path = tmp_path / "k.lock"
    path.write_text(json.dumps({"host": "another-node", "boot": "x", "pid": os.getpid(), "time": time.time(),
                                "token": "remote"}))  # its pid may be alive here: another host's pid says nothing
    t0 = time.monotonic()
    lock = FileLock(path, stale_after=0.5, poll=0.02).acquire()
    elapsed = time.monotonic() - t0
    assert lock.took_over and lock.waited and 0.4 < elapsed < 5
    assert json.loads(path.read_text())["token"] == lock.token
    lock.release()
    assert not path.exists() and not list(tmp_path.glob("k.lock.stale-*"))


def test_a_requeued_slurm_job_takes_over_its_earlier_attempts_lock_on_any_node_at_once(tmp_path, monkeypatch):
    monkeypatch.setenv("SLURM_JOB_ID", "41")
    monkeypatch.setenv("SLURM_RESTART_COUNT", "2")
    earlier = {"host": "another-node", "boot": "x", "pid": os.getpid(), "time": time.time(), "token": "remote",
               "slurm_job": "41", "slurm_restart": 1}  # the same job before its last requeue, on another node
    path = tmp_path / "k.lock"
    path.write_text(json.dumps(earlier))
    t0 = time.monotonic()
    with FileLock(path, stale_after=60) as lock:
        assert lock.took_over and time.monotonic() - t0 < 2  # no need to wait out stale_after
        assert json.loads(path.read_text())["slurm_job"] == "41"  # the lock names its job and attempt
        assert json.loads(path.read_text())["slurm_restart"] == 2
    for other in ({**earlier, "slurm_job": "42"}, {**earlier, "slurm_restart": 2}):  # another job, or this attempt
        path.write_text(json.dumps(other))
        with pytest.raises(LockTimeout):
            FileLock(path, stale_after=60).acquire(timeout=0.3)
        path.unlink()


def test_an_old_lock_is_taken_over_at_once(tmp_path):
    path = tmp_path / "k.lock"
    path.write_text(json.dumps({"host": "gone", "pid": 1, "time": 0}))
    old = time.time() - 3600
    os.utime(path, (old, old))
    t0 = time.monotonic()
    with FileLock(path, stale_after=60) as lock:
        assert lock.took_over and time.monotonic() - t0 < 2


def test_held_elsewhere_names_a_live_holder_only(tmp_path):
    path = tmp_path / "x.lock"
    mine, other = FileLock(path, stale_after=60), FileLock(path, stale_after=60)
    assert other.held_elsewhere() is None  # nobody holds it
    mine.acquire()
    try:
        assert mine.held_elsewhere() is None  # our own hold is not "elsewhere"
        assert other.held_elsewhere()["token"] == mine.token
    finally:
        mine.release()
    path.write_text(json.dumps({"host": "gone", "pid": 1, "token": "dead"}))
    old = time.time() - 3600
    os.utime(path, (old, old))
    assert other.held_elsewhere() is None  # a stale lock is nobody's
    assert path.exists()  # and asking took nothing over


def test_timeout_names_the_holder(tmp_path):
    path = tmp_path / "k.lock"
    with FileLock(path, stale_after=60):
        with pytest.raises(LockTimeout, match="still held by"):
            FileLock(path, stale_after=60, poll=0.02).acquire(timeout=0.2)


def test_a_job_waiting_for_the_lock_reads_the_entry_instead_of_computing(tmp_path):
    model, tok = tiny_model("llama")
    calls = {"n": 0}
    model.model.register_forward_pre_hook(lambda *_: calls.__setitem__("n", calls["n"] + 1))
    first = StatisticsCache(tmp_path)
    _, keys = cached_statistics(StatisticsCache(None), model, tok, TEXTS, model_identity=IDENTITY,
                                kinds=("linear_inputs",), progress=False)  # the key only, no disk
    key = keys["linear_inputs"]
    calls["n"] = 0
    lock = first.lock(key).acquire()  # another job is computing this entry
    out: dict = {}

    def waiter():
        sources: dict = {}
        found, _ = cached_statistics(StatisticsCache(tmp_path), model, tok, TEXTS, model_identity=IDENTITY,
                                     kinds=("linear_inputs",), progress=False, sources=sources)
        out.update(sources=sources, stats=found["linear_inputs"])

    t = threading.Thread(target=waiter)
    t.start()
    time.sleep(0.5)
    assert not out  # still waiting
    stats = collect_statistics(model, tok, TEXTS, kinds=("linear_inputs",), progress=False)["linear_inputs"]
    n = calls["n"]
    first.save(key, stats)
    lock.release()
    t.join(30)
    assert out["sources"] == {"linear_inputs": "waited"} and calls["n"] == n  # no forward pass of its own
    assert out["stats"].num_tokens == stats.num_tokens
    # next lookups: the same process has it in memory, a new one on disk; nobody recomputes
    s1, s2 = {}, {}
    cached_statistics(first, model, tok, TEXTS, model_identity=IDENTITY, kinds=("linear_inputs",),
                      progress=False, sources=s1)
    cached_statistics(StatisticsCache(tmp_path), model, tok, TEXTS, model_identity=IDENTITY,
                      kinds=("linear_inputs",), progress=False, sources=s2)
    assert s1 == {"linear_inputs": "memory"} and s2 == {"linear_inputs": "disk"} and calls["n"] == n
    fresh: dict = {}
    cached_statistics(StatisticsCache(tmp_path / "other"), model, tok, TEXTS, model_identity=IDENTITY,
                      kinds=("linear_inputs",), progress=False, sources=fresh)
    assert fresh == {"linear_inputs": "computed"} and calls["n"] > n
    assert not list((tmp_path / "locks").glob("*.lock"))
