"""A run refused for its model leaves no W&B run behind, and a Hub id the Hub cannot be asked about is
refused at once, in one line, without retries. No network: the Hub is a closed port on this machine."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from mathneuro.models.hub import hub_access, unreachable

from .test_failures import error_line
from .test_runner import base_overrides, cli


def closed_endpoint() -> str:
    """``http://127.0.0.1:<port>`` of a port nothing listens on (connections are refused at once)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def hub_env(tmp_path: Path) -> dict[str, str]:
    return {"HF_HUB_OFFLINE": "0", "TRANSFORMERS_OFFLINE": "0", "HF_ENDPOINT": closed_endpoint(),
            "HF_HUB_CACHE": str(tmp_path / "hf-cache")}


def fake_cached(cache: Path, repo_id: str) -> None:
    """``repo_id``'s config.json in a Hugging Face cache laid out as huggingface_hub lays it out."""
    folder = cache / f"models--{repo_id.replace('/', '--')}"
    (folder / "refs").mkdir(parents=True)
    (folder / "refs" / "main").write_text("0" * 40)
    (folder / "snapshots" / ("0" * 40)).mkdir(parents=True)
    (folder / "snapshots" / ("0" * 40) / "config.json").write_text("{}")


def test_an_unreachable_hub_loads_a_cached_model_locally_and_refuses_any_other(tmp_path, monkeypatch):
    for name, value in hub_env(tmp_path).items():
        monkeypatch.setenv(name, value)
    assert unreachable(closed_endpoint()) is not None
    fake_cached(tmp_path / "hf-cache", "someone/cached")
    assert hub_access("someone/cached") is True  # from the cache, local_files_only: no retry
    with pytest.raises(ValueError, match=r"^model\.name_or_path: Hub id 'someone/elsewhere' is not in the local "
                                         r"Hugging Face cache .* cannot be reached"):
        hub_access("someone/elsewhere")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert hub_access("someone/cached") is True
    with pytest.raises(ValueError, match=r"'someone/elsewhere' is not in the local .* HF_HUB_OFFLINE is set"):
        hub_access("someone/elsewhere")


@pytest.mark.e2e
@pytest.mark.integration
def test_a_run_refused_for_its_model_leaves_no_wandb_run_and_no_folder(tiny_dir, tmp_path):
    not_a_model = tmp_path / "weights.bin"
    not_a_model.write_text("not a model")
    wandb_dir = tmp_path / "wandb-runs"
    wandb_dir.mkdir()
    env = {**hub_env(tmp_path), "WANDB_DIR": str(wandb_dir)}
    for name, words in ((str(not_a_model), "is a file but not a .gguf"),
                        ("nobody-mathneuro/no-such-model", "cannot be reached")):
        run = tmp_path / "runs" / name.replace("/", "_")
        res = cli([*base_overrides(tiny_dir, tmp_path / "cache"), f"model.name_or_path={name}", "eval=none",
                   "logger=wandb", f"hydra.run.dir={run}"], cwd=tmp_path, env=env)
        assert res.returncode == 2, res.stderr[-3000:]
        line = error_line(res)
        assert line.startswith("mathneuro: error: model.name_or_path: ") and words in line, line
        assert "Retrying" not in res.stderr and "thrown while requesting" not in res.stderr, res.stderr[-3000:]
        assert not run.exists(), sorted(str(p) for p in run.rglob("*"))
    assert not list(wandb_dir.rglob("offline-run-*")) and not list(wandb_dir.rglob("*.wandb"))
