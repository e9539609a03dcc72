"""Process-per-job launchers (joblib, submitit) share statistics through the on-disk cache's locks:
each dataset's statistics are computed once across the sweep, every point completes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter

import pytest


@pytest.mark.e2e
@pytest.mark.integration
@pytest.mark.parametrize("launcher", ["parallel", "submitit_local"])
def test_process_per_job_sweep_computes_each_datasets_statistics_once(launcher, tiny_dir, tmp_path):
    sweep, cache = tmp_path / "sweep", tmp_path / "cache"
    args = ["-m", f"hydra/launcher={launcher}", f"model.name_or_path={tiny_dir}", "model.name=tiny",
            "model.dtype=float32", "model.device=cpu", f"cache_dir={cache}", "num_samples=40", "batch_size=4",
            "max_length=64", "progress=false", "eval=none", "logger=none", "top_k=0.05,0.1",
            f"hydra.sweep.dir={sweep}"]
    env = {**os.environ, "HYDRA_FULL_ERROR": "1", "HF_HUB_OFFLINE": "1"}
    res = subprocess.run([sys.executable, "-m", "mathneuro", *args], cwd=tmp_path, capture_output=True, text=True,
                         timeout=600, env=env)
    assert res.returncode == 0, res.stderr[-3000:]
    results = [json.loads(p.read_text()) for p in sorted(sweep.glob("*/results.json"))]
    assert len(results) == 2 and all(r["status"] == "complete" for r in results)
    assert sorted(r["point"]["top_k"] for r in results) == [0.05, 0.1]
    used = [s for r in results for s in r["statistics"]]
    assert {s["dataset"] for s in used} == {"embedded_math", "embedded_nonmath"}
    for dataset in ("embedded_math", "embedded_nonmath"):
        sources = Counter(s["source"] for s in used if s["dataset"] == dataset)
        assert sources["computed"] == 1, (dataset, sources)  # once across the sweep, not once per job
        assert sum(sources.values()) == 2 and set(sources) <= {"computed", "waited", "disk", "memory"}
    for r in results:  # the keys recorded both ways agree
        assert [s["key"] for s in r["statistics"]] == r["statistics_keys"]
    assert len(list((cache / "statistics").glob("*.safetensors"))) == 2
    assert not list((cache / "statistics" / "locks").glob("*.lock"))  # every lock released
    if launcher == "submitit_local":
        assert list(sweep.rglob(".submitit"))  # really ran as submitit jobs
