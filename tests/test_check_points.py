"""experiments/claims/check_points.py and the fail-early checks of the claims runners, whose stage names, sweeps and
workers come from experiments/lib/stages.sh (no model loads)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from .conftest import EXPERIMENTS, load_experiment

RUNNERS = ("claims_amended.sh", "claims_confirm.sh")


def _module():
    return load_experiment("claims/check_points")


def test_compositions_vary_one_swept_key_at_a_time() -> None:
    runs = _module().compositions(["top_k=0.1", "method=mathneuro,random", "seed=0,1,2"])
    assert runs[0] == ["top_k=0.1", "method=mathneuro", "seed=0"]
    assert ["top_k=0.1", "method=random", "seed=0"] in runs
    assert ["top_k=0.1", "method=mathneuro", "seed=2"] in runs
    assert len(runs) == 1 + 1 + 2


def _base(tmp_path: Path) -> list[str]:  # the embedded model and data: nothing to fetch
    return ["logger=none", "eval=probes", "eval.tasks=[arith]", f"cache_dir={tmp_path / 'cache'}"]


def test_good_points_pass_and_a_limit_for_a_task_not_evaluated_is_refused(tmp_path, capsys) -> None:
    main = _module().main
    assert main(_base(tmp_path) + ["method=mathneuro,random", "eval.limits.arith=3"]) == 0
    assert "ok: 2 composition(s)" in capsys.readouterr().out
    assert main(_base(tmp_path) + ["eval.limits.gsm8k_gne=3"]) == 2
    err = capsys.readouterr().err
    assert "eval.limits.gsm8k_gne" in err and "not in eval.tasks" in err


@pytest.mark.e2e
def test_a_bad_value_in_any_swept_position_is_refused(tmp_path, capsys) -> None:
    main = _module().main
    assert main(_base(tmp_path) + ["method=mathneuro,nosuch"]) == 2
    assert "method" in capsys.readouterr().err
    assert main(_base(tmp_path) + ["eval.tasks=[arith,no_such_task_xyz]"]) == 2
    assert "no_such_task_xyz" in capsys.readouterr().err
    assert main(_base(tmp_path) + ["model.name_or_path=" + str(tmp_path / "absent" / "model.gguf")]) == 2
    assert "does not exist" in capsys.readouterr().err


def _claims(tmp_path: Path, runner: str, *args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(EXPERIMENTS / "claims" / runner), *args], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "ROOT": str(tmp_path / "sweeps"), **env})


def _fake_setup(tmp_path: Path, model: bool = True) -> dict[str, str]:
    """Empty copies of every data file the runners name, and (with ``model``) a stand-in model file."""
    data = tmp_path / "data"
    for name in ("gsm8k/train.jsonl", "gsm8k/test.jsonl", "race/validation_high.jsonl",
                 "race/test_high_by_article.jsonl", "mmlu/validation_prerelease.jsonl", "math/test.jsonl",
                 "mathqa/test_1000.jsonl", "egsm/egsm_full.jsonl",
                 "hellaswag/validation.jsonl", "piqa/validation.jsonl", "winogrande/validation.jsonl",
                 "wikitext2/test.jsonl", "mutual/validation.jsonl"):
        (data / name).parent.mkdir(parents=True, exist_ok=True)
        (data / name).write_text("")
    (tmp_path / "models" / "qwen2.5-coder-1.5b").mkdir(parents=True)
    if model:
        (tmp_path / "models" / "qwen2.5-coder-1.5b" / "model.gguf").write_bytes(b"GGUF")
    return {"DATA": str(data), "MODELS": str(tmp_path / "models"), "CACHE": str(tmp_path / "cache")}


@pytest.mark.integration
@pytest.mark.parametrize("runner", RUNNERS)
@pytest.mark.parametrize(("args", "message"), [
    (("prune51",), "unknown stage: prune51"),
    (("workers", "2", "claim1", "nosuch"), "workers: unknown stage nosuch"),
])
def test_a_runner_refuses_an_unknown_stage_before_anything_runs(tmp_path, runner, args, message) -> None:
    done = _claims(tmp_path, runner, *args, **_fake_setup(tmp_path))
    assert done.returncode == 2
    assert message in done.stderr
    assert not (tmp_path / "sweeps").exists() and not (tmp_path / "cache").exists()  # nothing ran


@pytest.mark.e2e
@pytest.mark.integration
@pytest.mark.parametrize("runner", RUNNERS)
@pytest.mark.parametrize("missing", ["model", "data", "root"])
def test_a_runner_stops_before_running_when_model_data_or_root_is_wrong(tmp_path, runner, missing) -> None:
    env = _fake_setup(tmp_path, model=missing != "model")
    if missing == "data":
        (Path(env["DATA"]) / "race" / "validation_high.jsonl").unlink()
    if missing == "root":
        env["ROOT"] = str(EXPERIMENTS.parent / "outputs" / "x")
    done = _claims(tmp_path, runner, "claim1", **env)
    assert done.returncode == 2
    expected = {"model": "no model at", "data": "race/validation_high.jsonl", "root": "lies inside the repository"}
    assert expected[missing] in done.stderr
    assert not (tmp_path / "sweeps").exists() and not (EXPERIMENTS.parent / "outputs" / "x").exists()
