"""What a killed point leaves in its run directory and the cache, and how the next run recovers.

Runs one point (a random 4-layer llama saved here, quick probes) with ``mathneuro``, ``kill -9``s it
in the phase asked for (``statistics``: while it holds a statistics lock, after its first checkpoint;
``evaluation``: after the first evaluated task is kept), lists every file left under the run directory
and the cache (with the lock files' contents), then runs the same command again and prints what the
second run reports (attempts, what it read back, lock takeovers). Used for docs/scale-out.md.

    python experiments/benchmarks/kill_recovery.py --phase statistics
    python experiments/benchmarks/kill_recovery.py --phase evaluation
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tests.slurm.sweeps import save_medium_model  # noqa: E402


def listing(root: Path) -> list[str]:
    """Every file under ``root`` (relative path, size; a lock file's JSON too), W&B's own files left out."""
    out = []
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root)
        if rel.parts and rel.parts[0] == "wandb" and len(rel.parts) == 2 and path.is_dir():
            out.append(f"  {rel}/  (W&B offline run, {sum(1 for p in path.rglob('*') if p.is_file())} files)")
        if path.is_dir() or "wandb" in rel.parts or (rel.parts and rel.parts[0] == "models"):
            continue
        line = f"  {rel}  ({path.stat().st_size} B)"
        if path.suffix == ".lock":
            line += f"\n      {path.read_text()}"
        out.append(line)
    return out


def trigger(phase: str, cache: Path, run: Path) -> bool:
    stats = cache / "statistics"
    if phase == "statistics":
        return any((stats / "locks").glob("*.lock")) and any((stats / "partial").glob("*.safetensors"))
    return any((stats / "baselines").glob("*.tasks/*.json")) or any((run / ".partial").glob("*/*.json"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--phase", choices=("statistics", "evaluation"), required=True)
    parser.add_argument("--num-samples", type=int, default=64)
    parser.add_argument("--workdir", type=Path, default=None)
    args = parser.parse_args()
    work = args.workdir or Path(tempfile.mkdtemp(prefix=f"kill-{args.phase}-"))
    model = work / "model"
    if not (model / "config.json").exists():
        save_medium_model(model)
    cache, run = work / "cache", work / "run"
    cmd = [sys.executable, "-m", "mathneuro", f"model.name_or_path={model}", "model.name=medium",
           "model.dtype=float32", "model.device=cpu", f"num_samples={args.num_samples}", "max_length=128",
           "checkpoint_every_s=2", "eval=quick", "progress=false", f"cache_dir={cache}", f"hydra.run.dir={run}"]
    env = {**os.environ, "WANDB_MODE": "offline"}
    first = subprocess.Popen(cmd, cwd=work, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    start = time.monotonic()
    while not trigger(args.phase, cache, run):
        if first.poll() is not None:
            raise SystemExit(f"the point ended (code {first.returncode}) before the {args.phase} phase was seen")
        time.sleep(0.05)
    os.kill(first.pid, signal.SIGKILL)
    first.wait()
    print(f"killed -9 after {time.monotonic() - start:.1f} s, during {args.phase}; left behind:")
    print(f"run dir {run}:")
    print("\n".join(listing(run)) or "  (nothing)")
    print(f"cache {cache} (models/ left out):")
    print("\n".join(listing(cache)) or "  (nothing)")
    start = time.monotonic()
    second = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True)
    print(f"\nsecond run: exit code {second.returncode} in {time.monotonic() - start:.1f} s")
    for line in (second.stdout + second.stderr).splitlines():
        if "taking over stale lock" in line or "resumes from its checkpoint" in line or "kept from" in line:
            print("  log:", line.split("] - ")[-1][:300])
    results = json.loads((run / "results.json").read_text())
    print("  results.json:", json.dumps({k: results.get(k) for k in ("status", "attempts", "resumed")}))
    print("  statistics:", json.dumps(results["statistics"]))
    print("left after the second run:")
    print("\n".join(listing(run) + listing(cache)))


if __name__ == "__main__":
    main()
