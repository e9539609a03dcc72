"""The timeout trial of issue 34 on a real single-node SLURM cluster started here (tests/slurm/cluster.py).

One point, SmolLM2-135M (the embedded model), 192 + 192 samples, quick probes, through
``hydra/launcher=slurm`` with ``timeout_min=2 signal_delay_s=60`` and ``max_num_timeout`` (3 in the
issue). Each attempt is signalled (USR2) 30-60 s after it starts; submitit requeues the job and the
next attempt resumes from what the earlier ones kept. Prints the attempts, SLURM's requeue count and
what each attempt read back, from ``results.json``. Needs root (or SLURM and munge installed).

    python experiments/benchmarks/slurm_timeout_trial.py --cache-from ~/.cache/mathneuro --max-num-timeout 3

Convert the GGUF before (any run with the same cache_dir): converting takes tens of seconds on a CPU,
is not resumable, and an attempt of a 2-minute job may not get through it.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tests.slurm.cluster import SlurmCluster, ensure_installed  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache-from", type=Path, default=None,
                        help="a mathneuro cache root whose embedded/ and models/ (the converted GGUF) to copy in, "
                             "so that no attempt spends its time converting the model")
    parser.add_argument("--cache-dir", type=Path, default=None,
                        help="use this cache_dir as it is (e.g. one where the GGUF is converted already: the "
                             "conversion is keyed by the GGUF's path, so a copy is converted again)")
    parser.add_argument("--num-samples", type=int, default=192)
    parser.add_argument("--max-num-timeout", type=int, default=3)
    parser.add_argument("--timeout-min", type=int, default=2)
    parser.add_argument("--signal-delay-s", type=int, default=60)
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--extra", nargs="*", default=[], help="more overrides for the point")
    args = parser.parse_args()
    ensure_installed()
    work = args.workdir or Path(tempfile.mkdtemp(prefix="slurm-trial-"))
    cache = args.cache_dir or work / "cache"
    for sub in ("embedded", "models"):
        if args.cache_from is not None and (args.cache_from / sub).is_dir() and not (cache / sub).exists():
            shutil.copytree(args.cache_from / sub, cache / sub)
    cluster = SlurmCluster(work / "slurm")
    cluster.start()
    try:
        sweep = work / "sweep"
        cmd = [sys.executable, "-m", "mathneuro", "-m", "hydra/launcher=slurm",
               f"hydra.launcher.partition={cluster.partition}", "hydra.launcher.gpus_per_node=0",
               "hydra.launcher.cpus_per_task=1", "hydra.launcher.mem_gb=4",
               f"hydra.launcher.timeout_min={args.timeout_min}", f"hydra.launcher.signal_delay_s={args.signal_delay_s}",
               f"hydra.launcher.max_num_timeout={args.max_num_timeout}", f"num_samples={args.num_samples}",
               "eval=quick", "progress=false", f"cache_dir={cache}", f"hydra.sweep.dir={sweep}", *args.extra]
        start = time.monotonic()
        proc = subprocess.run(cmd, cwd=work, env={**os.environ, **cluster.env, "WANDB_MODE": "offline"},
                              capture_output=True, text=True)
        wall = time.monotonic() - start
        print(f"sweep exit code {proc.returncode} after {wall:.0f} s (work dir {work})")
        if proc.returncode != 0:
            print(proc.stderr[-3000:])
        for path in sweep.glob("*/results.json"):
            results = json.loads(path.read_text())
            print(json.dumps({k: results.get(k) for k in ("status", "attempts", "cluster", "resumed", "timings")},
                             indent=1))
        logs = "".join(p.read_text(errors="replace") for p in (sweep / ".submitit").rglob("*_log.err"))
        print("timeout signals handled by submitit:", logs.count("this job is timed-out"))
    finally:
        cluster.cancel_all()
        cluster.stop()


if __name__ == "__main__":
    main()
