"""Sweep folders and caches are shareable: every file honours the umask, and a second user of a group
reads (and adds to) the first one's cache in a setgid folder (docs/scale-out.md, issue 39)."""

from __future__ import annotations

import grp
import os
import pwd
import shutil
import stat
import subprocess
import tempfile
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import torch

from mathneuro.evaluation.samples import copy_records, write_samples
from mathneuro.results.schema import PointResult
from mathneuro.statistics.cache import StatisticsCache
from mathneuro.statistics.passes import Statistics
from mathneuro.util.io import write_json_atomic, write_text_atomic
from mathneuro.util.locking import FileLock


def _stats(value: float) -> Statistics:
    return Statistics("linear_inputs", {"m.0::norm": torch.full((4,), value), "m.0::sq": torch.full((4,), value)},
                      num_samples=3, num_tokens=12)


def _write_everything(root: Path) -> dict[str, int]:
    """One file of each kind the pipeline writes (results, records, a cache entry, a lock, text): their modes."""
    PointResult(point={"method": "mathneuro"}).write(root / "run" / "results.json")
    write_samples(root / "run" / "samples", {"arith": [{"doc_id": 0, "exact_match": 1.0}]}, {"arith": "math"})
    copy_records(root / "run" / "samples", root / "baseline_samples" / "k")
    cache = StatisticsCache(root / "cache")
    cache.save("k1", _stats(1.0))
    write_json_atomic(root / "x.json", {"a": 1})
    write_text_atomic(root / "x.md", "hello")
    lock = FileLock(root / "cache" / "locks" / "k1.lock").acquire()
    modes = {p.relative_to(root).as_posix(): stat.S_IMODE(p.stat().st_mode) for p in root.rglob("*") if p.is_file()}
    lock.release()
    return modes


@pytest.fixture
def umask() -> Iterator[Callable[[int], None]]:
    before = os.umask(0o022)
    os.umask(before)
    yield os.umask
    os.umask(before)


@pytest.mark.parametrize(("mask", "mode"), [(0o022, 0o644), (0o002, 0o664), (0o077, 0o600)])
def test_every_file_written_honours_the_umask(tmp_path: Path, umask, mask: int, mode: int) -> None:
    umask(mask)
    modes = _write_everything(tmp_path)
    names = {Path(p).name for p in modes}
    assert {"results.json", "arith.jsonl", ".complete.json", "k1.safetensors", "k1.json", "k1.lock"} <= names
    assert {p: oct(m) for p, m in modes.items()} == {p: oct(mode) for p in modes}


# ---------------------------------------------------------------------------- a second user, for real
def _as_user(user: str, mask: int, work: Callable[[], None]) -> None:
    """Run ``work`` in a forked child as ``user`` (its groups, ``mask`` as umask); fail if it fails."""
    entry = pwd.getpwnam(user)
    pid = os.fork()
    if pid == 0:  # the child: never return into pytest
        code = 1
        try:
            os.setgroups(os.getgrouplist(user, entry.pw_gid))
            os.setgid(entry.pw_gid)
            os.setuid(entry.pw_uid)
            os.umask(mask)
            work()
            code = 0
        except BaseException as exc:  # noqa: BLE001 - reported through the exit code and stderr
            os.write(2, f"as {user}: {type(exc).__name__}: {exc}\n".encode())
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, f"the work as {user} failed (see stderr)"


@pytest.fixture
def two_users() -> Iterator[tuple[str, str, str]]:
    """A group and two users in it, created for the test (root only), removed afterwards."""
    if os.geteuid() != 0 or shutil.which("useradd") is None:
        pytest.skip("needs root and useradd to create a second user")
    tag = uuid.uuid4().hex[:6]
    group, users = f"mn{tag}", (f"mna{tag}", f"mnb{tag}")
    subprocess.run(["groupadd", group], check=True)
    try:
        for user in users:
            subprocess.run(["useradd", "-M", "-N", "-g", group, "-s", "/usr/sbin/nologin", user], check=True)
        yield group, *users
    finally:
        for user in users:
            subprocess.run(["userdel", user], check=False, capture_output=True)
        subprocess.run(["groupdel", group], check=False, capture_output=True)


@pytest.mark.integration  # useradd, groupadd and a forked child
def test_a_second_user_reads_and_extends_the_first_users_cache(two_users) -> None:
    group, alice, bob = two_users
    gid = grp.getgrnam(group).gr_gid
    base = Path(tempfile.mkdtemp(prefix="mn-shared-"))
    try:
        base.chmod(0o755)
        cache = base / "cache"
        cache.mkdir()
        os.chown(cache, 0, gid)
        cache.chmod(0o2775)  # the recipe of docs/scale-out.md: group-owned, group-writable, setgid

        def alice_writes() -> None:
            store = StatisticsCache(cache / "statistics")
            with store.lock("k1"):
                store.save("k1", _stats(1.0))

        def bob_reads_and_writes() -> None:
            store = StatisticsCache(cache / "statistics")
            got = store.load("k1", kind="linear_inputs", num_samples=3)
            assert got is not None and torch.equal(got.tensors["m.0::norm"], torch.full((4,), 1.0))
            with store.lock("k2"):  # a lock and an entry of his own in the folders alice made
                store.save("k2", _stats(2.0))
            with store.lock("k1"):  # and alice's key's lock
                pass

        _as_user(alice, 0o002, alice_writes)
        _as_user(bob, 0o002, bob_reads_and_writes)
        _as_user(alice, 0o002, lambda: StatisticsCache(cache / "statistics").load("k2") or (_ for _ in ()).throw(
            AssertionError("alice cannot read bob's entry")))
        for path in (cache / "statistics").rglob("*"):
            info = path.stat()
            assert info.st_gid == gid, path  # setgid: everything belongs to the group
            if path.is_file():
                assert stat.S_IMODE(info.st_mode) == 0o664, path
            else:
                assert stat.S_IMODE(info.st_mode) & 0o2070 == 0o2070, path
        owners = {pwd.getpwuid(p.stat().st_uid).pw_name for p in (cache / "statistics").glob("*.safetensors")}
        assert owners == {alice, bob}
    finally:
        shutil.rmtree(base, ignore_errors=True)
