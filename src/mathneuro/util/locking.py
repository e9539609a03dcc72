"""A lock file that works across processes and machines sharing a (network) filesystem.

``flock`` is unreliable on NFS and does not survive a node's crash cleanly, so the lock is a
file created with ``O_CREAT | O_EXCL`` (atomic on local filesystems and NFSv3+), holding the
holder's host, pid and start time. While held, a daemon thread refreshes the file's mtime
(a heartbeat). A waiter treats the lock as stale — its holder was killed — when the mtime is
older than ``stale_after`` seconds by the wall clock, or has not changed for ``stale_after``
seconds of the waiter's own observation (robust to clock skew between machines); it then
takes the lock over by renaming the stale file away and creating its own. A holder on the
waiter's own host (same host name and boot) whose process is gone — killed, crashed, or its
pid since reused by a younger process — is stale at once: a resumed sweep need not wait out
``stale_after`` for the point its killed predecessor was running. Inside a SLURM job the file also
names the job and its requeue count: a requeued job (on any node) takes over at once a lock that an
earlier attempt of the same job left behind, since SLURM runs one attempt of a job at a time.

The worst a race in the takeover can cause is one duplicate computation: callers write their
results atomically and re-check for them after acquiring the lock.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
import uuid
from pathlib import Path

log = logging.getLogger("mathneuro")


class LockTimeout(TimeoutError):
    """The lock was not acquired within the caller's ``timeout``."""


class FileLock:
    """``with FileLock(path):`` — hold ``path`` exclusively across processes and hosts.

    ``waited`` tells, after acquiring, whether another holder had to be waited for (or taken
    over), so a caller can tell "computed it myself" from "someone else just did".
    """

    def __init__(self, path: str | os.PathLike, *, stale_after: float = 300.0, heartbeat: float | None = None,
                 poll: float = 0.2):
        self.path = Path(path)
        self.stale_after = float(stale_after)
        self.heartbeat = float(heartbeat) if heartbeat is not None else max(self.stale_after / 10, 0.05)
        self.poll = float(poll)
        self.token = uuid.uuid4().hex
        self.waited = False
        self.took_over = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- acquiring ---------------------------------------------------------------------------
    def _try_create(self) -> bool:
        try:
            fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666)  # less the umask
        except FileExistsError:
            return False
        info = {"host": socket.gethostname(), "boot": _boot_id(), "pid": os.getpid(), "time": time.time(),
                "token": self.token, **_slurm_attempt()}
        try:
            with os.fdopen(fd, "w") as f:
                json.dump(info, f)
        except OSError as exc:  # disk full: an empty lock file would make every later waiter wait it out
            self.path.unlink(missing_ok=True)
            raise OSError(exc.errno, exc.strerror or str(exc), str(self.path)) from None
        return True

    def holder(self) -> dict | None:
        """The current holder's ``{host, pid, time, token}``, or None (no lock, or unreadable)."""
        try:
            return json.loads(self.path.read_text())
        except (OSError, ValueError):
            return None

    def held_elsewhere(self) -> dict | None:
        """The holder's ``{host, pid, time, token}`` if another holder has the lock now (its file is
        there with a recent heartbeat), else None; acquires nothing."""
        try:
            mtime = self.path.stat().st_mtime
        except FileNotFoundError:
            return None
        holder = self.holder()
        if (time.time() - mtime > self.stale_after or holder is None or holder.get("token") == self.token
                or _holder_is_gone(holder)):
            return None
        return holder

    def _take_over(self) -> None:
        """Move a stale lock file aside (one waiter wins the rename), then drop it."""
        tomb = self.path.with_name(f"{self.path.name}.stale-{self.token}")
        try:
            os.rename(self.path, tomb)
        except FileNotFoundError:
            return  # another waiter took it over first, or the holder released it
        log.warning("taking over stale lock %s (holder %s)", self.path, _read_json(tomb))
        self.took_over = True
        try:
            os.unlink(tomb)
        except OSError:
            pass

    def acquire(self, timeout: float | None = None) -> FileLock:
        """Block until the lock is ours (raise :class:`LockTimeout` after ``timeout`` seconds)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        start = time.monotonic()
        seen_mtime, seen_since = None, start
        announced = False
        while not self._try_create():
            self.waited = True
            now = time.monotonic()
            try:
                mtime = self.path.stat().st_mtime
            except FileNotFoundError:
                continue  # released just now: try again at once
            if mtime != seen_mtime:
                seen_mtime, seen_since = mtime, now
            if (time.time() - mtime > self.stale_after or now - seen_since > self.stale_after
                    or _holder_is_gone(self.holder())):
                self._take_over()
                seen_mtime = None
                continue
            if not announced:
                log.info("waiting for %s (held by %s)", self.path, self.holder())
                announced = True
            if timeout is not None and now - start > timeout:
                raise LockTimeout(f"{self.path}: still held by {self.holder()} after {timeout:.0f} s")
            time.sleep(self.poll)
        self._stop.clear()
        self._thread = threading.Thread(target=self._beat, name=f"lock-heartbeat-{self.path.name}", daemon=True)
        self._thread.start()
        return self

    def _beat(self) -> None:
        while not self._stop.wait(self.heartbeat):
            try:
                os.utime(self.path)
            except FileNotFoundError:
                log.warning("lock %s vanished while held (taken over as stale?)", self.path)
                return

    # -- releasing ---------------------------------------------------------------------------
    def release(self) -> None:
        """Stop the heartbeat and remove the lock file if it is still ours."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        holder = self.holder()
        if holder is not None and holder.get("token") == self.token:
            try:
                os.unlink(self.path)
            except FileNotFoundError:
                pass

    def __enter__(self) -> FileLock:
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


def _read_json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _boot_id() -> str | None:
    """This kernel boot's id (Linux), so "same host" also means "same boot, same pid space"."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return None


def _proc_stat(pid: int) -> list[str] | None:
    """The fields of ``/proc/<pid>/stat`` after ``pid (comm)``: state first, start time at index 19."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2:].split()
    return fields if len(fields) > 19 else None


def _start_epoch(fields: list[str] | None) -> float | None:
    """The start time (Unix time) of the process whose :func:`_proc_stat` fields these are."""
    if fields is None:
        return None
    try:
        btime = next(float(line.split()[1]) for line in Path("/proc/stat").read_text().splitlines()
                     if line.startswith("btime "))
        return btime + int(fields[19]) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, StopIteration):
        return None


def _process_start_epoch(pid: int) -> float | None:
    """When process ``pid`` started (Unix time), from ``/proc``; None where that can't be read."""
    return _start_epoch(_proc_stat(pid))


def _slurm_attempt() -> dict:
    """``{"slurm_job": id, "slurm_restart": n}`` inside a SLURM job (n: how often it was requeued), else {}."""
    job = os.environ.get("SLURM_JOB_ID")
    if not job:
        return {}
    try:
        restart = int(os.environ.get("SLURM_RESTART_COUNT") or 0)
    except ValueError:
        restart = 0
    return {"slurm_job": job, "slurm_restart": restart}


def _earlier_attempt_of_this_job(holder: dict | None) -> bool:
    """True when ``holder`` is an earlier attempt (before a requeue) of the SLURM job this process runs in."""
    mine = _slurm_attempt()
    if not mine or not holder or holder.get("slurm_job") != mine["slurm_job"]:
        return False
    restart = holder.get("slurm_restart")
    return isinstance(restart, int) and restart < mine["slurm_restart"]


def _holder_is_gone(holder: dict | None) -> bool:
    """True when ``holder`` ran on this host in this boot and its process no longer exists (or is a
    zombie, or the pid now belongs to a process started after the lock was taken). A holder on
    another host, or one that can't be judged, is never called gone: the heartbeat decides."""
    if _earlier_attempt_of_this_job(holder):
        return True
    if os.name != "posix":  # os.kill(pid, 0) terminates the process on Windows
        return False
    if not holder or holder.get("host") != socket.gethostname() or holder.get("boot") != _boot_id():
        return False
    try:
        pid = int(holder["pid"])
    except (KeyError, TypeError, ValueError):
        return False
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False  # alive, owned by someone else
    fields = _proc_stat(pid)
    if fields is None:
        return False
    if fields[0] in ("Z", "X"):
        return True
    started = _start_epoch(fields)
    taken = holder.get("time")
    return started is not None and isinstance(taken, (int, float)) and started > taken + 2.0
