"""A sweep through our launcher config (``hydra/launcher=slurm``) on a real SLURM cluster: one job array,
named ``mathneuro``, statistics computed once across the jobs, an offline W&B run and the SLURM ids per point."""

from __future__ import annotations

import json
import time
from collections import Counter

import pytest

from tests.slurm.sweeps import finish, launcher_args, leftovers, start_sweep

pytestmark = pytest.mark.slurm


def test_a_three_point_sweep_runs_as_one_job_array_and_shares_its_statistics(slurm_cluster, tiny_dir, tmp_path):
    sweep, cache = tmp_path / "sweep", tmp_path / "cache"
    proc = start_sweep(slurm_cluster, [
        *launcher_args(slurm_cluster.partition), f"model.name_or_path={tiny_dir}", "model.name=tiny",
        "model.dtype=float32", "model.device=cpu", f"cache_dir={cache}", "num_samples=40", "batch_size=4",
        "max_length=64", "progress=false", "eval=none", "logger=wandb", "top_k=0.02,0.05,0.1",
        f"hydra.sweep.dir={sweep}"], tmp_path)
    names, array_ids = set(), set()
    while proc.poll() is None:  # what squeue shows while the sweep runs
        for job_id, name, _state, _reason in slurm_cluster.squeue():
            names.add(name)
            array_ids.add(job_id)
        time.sleep(0.3)
    out = finish(proc, tmp_path, 0)
    assert proc.returncode == 0, out[-4000:]
    assert names == {"mathneuro"}  # Hydra's job name, not the script's ("cli")
    assert any("_" in job_id for job_id in array_ids)  # array tasks show as <array id>_<index>

    results = [json.loads(p.read_text()) for p in sorted(sweep.glob("*/results.json"))]
    assert len(results) == 3 and all(r["status"] == "complete" for r in results)
    assert sorted(r["point"]["top_k"] for r in results) == [0.02, 0.05, 0.1]
    clusters = [r["cluster"] for r in results]
    assert {c["scheduler"] for c in clusters} == {"slurm"}
    assert len({c["array_job_id"] for c in clusters}) == 1  # one array
    assert sorted(c["array_task_id"] for c in clusters) == ["0", "1", "2"]
    assert len({c["job_id"] for c in clusters}) == 3  # one SLURM job per point
    assert {c["job_name"] for c in clusters} == {"mathneuro"} and {c["restart_count"] for c in clusters} == {0}
    assert all(r["attempts"] == 1 and "resumed" not in r for r in results)

    used = [s for r in results for s in r["statistics"]]
    for dataset in ("embedded_math", "embedded_nonmath"):
        sources = Counter(s["source"] for s in used if s["dataset"] == dataset)
        assert sources["computed"] == 1, (dataset, sources)  # once across the array, not once per job
        assert sum(sources.values()) == 3 and set(sources) <= {"computed", "waited", "disk"}
    assert len(list((cache / "statistics").glob("*.safetensors"))) == 2

    for point in (p.parent for p in sweep.glob("*/results.json")):
        assert len(list((point / "wandb").glob("offline-run-*"))) == 1, point  # every point its offline W&B run
        assert (point / "mathneuro.log").is_file() and not (point / "cli.log").exists()  # Hydra's log: same name
    assert list((sweep / ".submitit").glob("*_0/*_0_0_log.out"))  # submitit's array task logs
    assert leftovers(sweep, cache) == []
