"""A real single-node SLURM cluster on this machine, for the ``slurm`` test tier.

:class:`SlurmCluster` writes a munge key and a ``slurm.conf`` (one node with this machine's CPUs and
memory, one partition) into a folder of its own, starts ``munged``, ``slurmctld`` and ``slurmd`` in
the foreground as its children and stops exactly those processes, by their pids. Everything the
daemons write (state, spool, logs, pid files, the munge socket) stays in that folder; jobs and client
commands find the cluster through ``SLURM_CONF`` (:attr:`SlurmCluster.env`).

Containers rarely allow cgroups, so processes are tracked through ``/proc`` (``proctrack/linuxproc``),
with no task plugin and no accounting: ``sacct`` fails (submitit then judges a job by its result file).
Debian's SLURM (22.05) and munge are installed with apt when missing (:func:`ensure_installed`; root).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

PACKAGES = ("slurm-wlm", "munge")
DAEMONS = ("munged", "slurmctld", "slurmd")
PARTITION = "debug"


def _which(name: str) -> str | None:
    return shutil.which(name) or next((str(p) for p in (Path("/usr/sbin") / name, Path("/sbin") / name)
                                       if p.is_file()), None)


def ensure_installed() -> None:
    """Install SLURM and munge with apt-get when a daemon or client is missing (needs root)."""
    if all(_which(n) for n in (*DAEMONS, "sbatch", "squeue", "scontrol")):
        return
    if os.geteuid() != 0:
        raise RuntimeError("SLURM is not installed and this is not root: "
                           f"run `apt-get install -y {' '.join(PACKAGES)}`")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    subprocess.run(["apt-get", "update", "-q"], check=True, env=env, capture_output=True)
    subprocess.run(["apt-get", "install", "-y", "-q", "--no-install-recommends", *PACKAGES], check=True, env=env,
                   capture_output=True)


def free_port() -> int:
    """A TCP port no one listens on now (the daemons bind it a moment later)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def machine_memory_mb() -> int:
    """Total memory of this machine in MB (``/proc/meminfo``)."""
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) // 1024
    raise RuntimeError("no MemTotal in /proc/meminfo")


def slurm_conf(root: Path, node: str, cpus: int, memory_mb: int, ports: tuple[int, int], *,
               kill_wait: int = 5, cred_expire: int = 5) -> str:
    """The text of a one-node, one-partition ``slurm.conf`` whose files all live under ``root``."""
    ctld_port, slurmd_port = ports
    return "\n".join([
        "ClusterName=mathneuro-test",
        f"SlurmctldHost={node}(127.0.0.1)",
        "SlurmUser=root",
        "SlurmdUser=root",
        f"SlurmctldPort={ctld_port}",
        f"SlurmdPort={slurmd_port}",
        # cred_expire is also how long a requeued job waits before it may start again (120 s by default)
        f"AuthInfo=socket={root / 'munge' / 'munge.socket'},cred_expire={cred_expire}",
        "AuthType=auth/munge",
        "CredType=cred/munge",
        f"StateSaveLocation={root / 'state'}",
        f"SlurmdSpoolDir={root / 'spool'}",
        f"SlurmctldPidFile={root / 'slurmctld.pid'}",
        f"SlurmdPidFile={root / 'slurmd.pid'}",
        f"SlurmctldLogFile={root / 'log' / 'slurmctld.log'}",
        f"SlurmdLogFile={root / 'log' / 'slurmd.log'}",
        "SlurmctldDebug=info",
        "SlurmdDebug=info",
        "ProctrackType=proctrack/linuxproc",  # no cgroups in a container
        "TaskPlugin=task/none",
        "JobAcctGatherType=jobacct_gather/none",
        "AccountingStorageType=accounting_storage/none",
        "JobCompType=jobcomp/none",
        "SwitchType=switch/none",
        "MpiDefault=none",
        "SchedulerType=sched/backfill",
        "SchedulerParameters=sched_interval=2,bf_interval=2",  # a requeued job starts once eligible, not a minute on
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_Core_Memory",
        "ReturnToService=2",
        "JobRequeue=1",
        f"KillWait={kill_wait}",  # seconds between SIGTERM and SIGKILL when a job is stopped
        "MinJobAge=600",
        "InactiveLimit=0",
        "Waittime=0",
        f"NodeName={node} NodeAddr=127.0.0.1 CPUs={cpus} RealMemory={memory_mb} State=UNKNOWN",
        f"PartitionName={PARTITION} Nodes={node} Default=YES MaxTime=INFINITE State=UP",
        "",
    ])


class SlurmCluster:
    """Start and stop a one-node SLURM cluster whose files are all under ``root``."""

    def __init__(self, root: str | os.PathLike, *, kill_wait: int = 5, cred_expire: int = 5):
        self.root = Path(root)
        self.node = socket.gethostname().split(".")[0]  # slurmd's node name is `hostname -s`
        self.cpus = os.cpu_count() or 1
        self.memory_mb = machine_memory_mb()
        self.kill_wait = kill_wait
        self.cred_expire = cred_expire
        self.conf = self.root / "slurm.conf"
        self.partition = PARTITION
        self.procs: dict[str, subprocess.Popen] = {}

    @property
    def env(self) -> dict[str, str]:
        """What a client command or a job needs to find this cluster."""
        return {"SLURM_CONF": str(self.conf)}

    def _popen(self, name: str, cmd: list[str]) -> None:
        log = open(self.root / "log" / f"{name}.out", "ab")  # noqa: SIM115 - the child holds it
        self.procs[name] = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                            env={**os.environ, **self.env}, start_new_session=True)
        log.close()
        time.sleep(0.5)
        if self.procs[name].poll() is not None:
            raise RuntimeError(f"{name} exited at once (code {self.procs[name].returncode}): "
                               f"{self.log_tail(name)}")

    def log_tail(self, name: str, lines: int = 20) -> str:
        """The last lines of a daemon's logs (its own log file and its stdout)."""
        out = []
        for path in (self.root / "log" / f"{name}.log", self.root / "log" / f"{name}.out"):
            if path.exists():
                out += path.read_text(errors="replace").splitlines()[-lines:]
        return "\n".join(out)

    def start(self, timeout: float = 60.0) -> SlurmCluster:
        """Write the configuration, start the three daemons and wait until the node takes jobs."""
        for sub in ("munge", "state", "spool", "log"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        munge = self.root / "munge"
        munge.chmod(0o700)
        key = munge / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o600)
        self.conf.write_text(slurm_conf(self.root, self.node, self.cpus, self.memory_mb, (free_port(), free_port()),
                                        kill_wait=self.kill_wait, cred_expire=self.cred_expire))
        try:
            self._popen("munged", [_which("munged"), "--foreground", "--force", f"--socket={munge / 'munge.socket'}",
                                   f"--key-file={key}", f"--pid-file={munge / 'munged.pid'}",
                                   f"--log-file={self.root / 'log' / 'munged.log'}",
                                   f"--seed-file={munge / 'munged.seed'}"])
            self._wait(lambda: (munge / "munge.socket").exists(), 10, "munged's socket")
            self._popen("slurmctld", [_which("slurmctld"), "-D", "-i", "-f", str(self.conf)])
            self._wait(lambda: self._run(["scontrol", "ping"], check=False).returncode == 0, timeout, "slurmctld")
            self._popen("slurmd", [_which("slurmd"), "-D", "-N", self.node, "-f", str(self.conf)])
            self._wait(self._node_ready, timeout, f"node {self.node}")
        except BaseException:
            self.stop()
            raise
        return self

    def _node_ready(self) -> bool:
        out = self._run(["sinfo", "-h", "-N", "-o", "%t", "-n", self.node], check=False).stdout.strip()
        return out in ("idle", "mix", "alloc")

    def _wait(self, ready, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while not ready():
            for name, proc in self.procs.items():
                if proc.poll() is not None:
                    raise RuntimeError(f"{name} exited (code {proc.returncode}) while waiting for {what}:\n"
                                       f"{self.log_tail(name)}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"{what} not ready after {timeout:.0f} s:\n" +
                                   "\n".join(self.log_tail(n) for n in self.procs))
            time.sleep(0.3)

    def _run(self, cmd: list[str], check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess:
        return subprocess.run(cmd, capture_output=True, text=True, check=check, timeout=timeout,
                              env={**os.environ, **self.env})

    def scontrol(self, *args: str) -> str:
        """``scontrol <args>`` against this cluster; its stdout (a failure names scontrol's own message)."""
        done = self._run(["scontrol", *args], check=False)
        if done.returncode != 0:
            raise AssertionError(f"scontrol {' '.join(args)} failed ({done.returncode}): {done.stderr.strip()} "
                                 f"{done.stdout.strip()}; jobs: {self.jobs()}")
        return done.stdout

    def requeue(self, job_id: str, timeout: float = 60.0) -> None:
        """``scontrol requeue`` a running job, as preemption does; retried while slurmctld calls the job in
        transition (e.g. its previous attempt still completing on a quick machine)."""
        deadline = time.monotonic() + timeout
        while True:
            done = self._run(["scontrol", "requeue", job_id], check=False)
            if done.returncode == 0:
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"scontrol requeue {job_id} failed ({done.returncode}): "
                                     f"{done.stderr.strip()}; jobs: {self.jobs()}")
            time.sleep(0.5)

    def job(self, job_id: str) -> dict[str, str]:
        """scontrol's fields of one job ({} when slurmctld no longer knows it)."""
        return next((fields for fields in self.jobs() if fields.get("JobId") == job_id), {})

    def running_attempt(self, job_id: str, restarts: int) -> bool:
        """Whether job ``job_id`` runs now after exactly ``restarts`` requeues (its attempt ``restarts + 1``)."""
        fields = self.job(job_id)
        return fields.get("JobState") == "RUNNING" and fields.get("Restarts") == str(restarts)

    def signal(self, job: str, name: str) -> None:
        """Send signal ``name`` (e.g. ``USR2``, what SLURM sends before a time limit) to a job's steps."""
        self._run(["scancel", f"--signal={name}", job])

    def squeue(self, fmt: str = "%i|%j|%T|%r") -> list[list[str]]:
        """Every job in the queue as the fields of ``fmt`` (job id, name, state, reason by default)."""
        out = self._run(["squeue", "-h", "-a", "-r", "-o", fmt]).stdout
        return [line.split("|") for line in out.splitlines() if line.strip()]

    def jobs(self) -> list[dict[str, str]]:
        """Every job slurmctld still knows (running, pending and recently finished), as scontrol's fields."""
        out = self._run(["scontrol", "show", "job", "-o"], check=False).stdout
        jobs = []
        for line in out.splitlines():
            if "JobId=" not in line:
                continue
            fields = dict(item.split("=", 1) for item in line.split() if "=" in item)
            jobs.append(fields)
        return jobs

    def cancel_all(self, timeout: float = 60.0) -> None:
        """Cancel every job of this cluster and wait until none runs (their processes are gone)."""
        if "slurmctld" not in self.procs or self.procs["slurmctld"].poll() is not None:
            return
        self._run(["scancel", "--full", "--partition", self.partition], check=False)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self._run(["squeue", "-h"], check=False).stdout.strip():
            time.sleep(0.5)

    def stop(self, grace: float = 15.0) -> None:
        """Stop the daemons this object started (slurmd, slurmctld, then munged), each by its pid."""
        for name in reversed(DAEMONS):
            proc = self.procs.pop(name, None)
            if proc is None or proc.poll() is not None:
                continue
            os.kill(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait(timeout=grace)

    def __enter__(self) -> SlurmCluster:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
