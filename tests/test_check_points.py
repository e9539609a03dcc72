"""experiments/claims/check_points.py and the fail-early checks of experiments/claims_1p5b.sh (no model loads)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from .conftest import EXPERIMENTS, load_experiment

CLAIMS = EXPERIMENTS / "claims_1p5b.sh"


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


def test_a_bad_value_in_any_swept_position_is_refused(tmp_path, capsys) -> None:
    main = _module().main
    assert main(_base(tmp_path) + ["method=mathneuro,nosuch"]) == 2
    assert "method" in capsys.readouterr().err
    assert main(_base(tmp_path) + ["eval.tasks=[arith,no_such_task_xyz]"]) == 2
    assert "no_such_task_xyz" in capsys.readouterr().err
    assert main(_base(tmp_path) + ["model.name_or_path=" + str(tmp_path / "absent" / "model.gguf")]) == 2
    assert "does not exist" in capsys.readouterr().err


def _claims(tmp_path: Path, stage: str = "prune", **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(CLAIMS), stage], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "ROOT": str(tmp_path / "sweeps"), **env})


def _fake_data(tmp_path: Path) -> Path:
    data = tmp_path / "data"
    for name in ("gsm8k/train.jsonl", "gsm8k/test.jsonl", "race/validation_high.jsonl",
                 "race/test_high_by_article.jsonl", "mmlu/validation_prerelease.jsonl"):
        (data / name).parent.mkdir(parents=True, exist_ok=True)
        (data / name).write_text("")
    return data


@pytest.mark.integration
@pytest.mark.parametrize(("variable", "value"), [("GSM8K_FILTER", "wikitext"), ("GSM8K_PARTS", "prune,eval")])
def test_claims_script_refuses_a_bad_choice_before_running(tmp_path, variable, value) -> None:
    data = _fake_data(tmp_path)
    (tmp_path / "models" / "m").mkdir(parents=True)
    (tmp_path / "models" / "m" / "model.gguf").write_bytes(b"GGUF")
    done = _claims(tmp_path, "core_gsm8k", DATA=str(data), MODELS=str(tmp_path / "models"), GGUF="m",
                   DTYPE="float32", **{variable: value})
    assert done.returncode == 2
    assert f"{variable}={value}: expected" in done.stderr
    assert not (tmp_path / "sweeps").exists()  # nothing ran


@pytest.mark.integration
@pytest.mark.parametrize("missing", ["model", "data"])
def test_claims_script_stops_before_running_when_model_or_data_is_missing(tmp_path, missing) -> None:
    data = _fake_data(tmp_path)
    (tmp_path / "models" / "m").mkdir(parents=True)  # the model folder, without its file unless data is missing
    if missing == "data":
        (data / "race" / "validation_high.jsonl").unlink()
        (tmp_path / "models" / "m" / "model.gguf").write_bytes(b"GGUF")
    done = _claims(tmp_path, DATA=str(data), MODELS=str(tmp_path / "models"), GGUF="m")
    assert done.returncode == 2
    if missing == "data":
        assert "race/validation_high.jsonl" in done.stderr
    else:
        assert "no model at" in done.stderr and "fetch-models.sh" in done.stderr
    assert not (tmp_path / "sweeps").exists()  # nothing ran
