import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("WANDB_SILENT", "true")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def pytest_collection_modifyitems(config, items):
    """Test tiers: a test is ``unit`` unless marked ``integration``, ``e2e``, ``slow`` or ``slurm``
    (``make test-unit``)."""
    for item in items:
        if not any(item.get_closest_marker(tier) for tier in ("integration", "e2e", "slow", "slurm")):
            item.add_marker(pytest.mark.unit)


@pytest.fixture(autouse=True)
def _isolated_caches(tmp_path_factory, monkeypatch):
    """Keep every cache the code under test writes inside pytest's temporary tree."""
    root = tmp_path_factory.getbasetemp() / "caches"
    monkeypatch.setenv("HF_DATASETS_CACHE", str(root / "datasets"))
    monkeypatch.setenv("MATHNEURO_CACHE", str(root / "mathneuro"))
    monkeypatch.delenv("MATHNEURO_DATA_DIR", raising=False)  # a test opts in to local eval data
    yield


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    """A small data folder laid out like ../shared/data, written by the tests themselves."""
    from tests.sample_data import write_sample_data

    return write_sample_data(tmp_path_factory.mktemp("data"))


TEXTS = [
    "Natalia sold clips to 48 of her friends in April. 48/2 = 24. #### 72",
    "a",
    "The quick brown fox jumps over the lazy dog.",
    "xyz 123 456 789",
    "What is 7 times 8? 7*8 = 56. The answer is 56.",
    "Read the passage and answer: the cat sat on the mat.",
    "Q: Which planet is largest? A: Jupiter",
]


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory) -> Path:
    """A tiny random llama saved like any local checkpoint (one per test module)."""
    from mathneuro.models.tiny import tiny_model

    model, tok = tiny_model("llama")
    return save_checkpoint(model, tok, tmp_path_factory.mktemp("tiny-llama"))


def save_checkpoint(model, tok, path: Path) -> Path:
    """``model`` and ``tok`` saved in ``path`` as a local checkpoint is; ``path``."""
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path


EXPERIMENTS = Path(__file__).resolve().parents[1] / "experiments"
#: experiments/claims holds the package ``claimslib`` the claims scripts import (as they do when run from there)
sys.path.insert(0, str(EXPERIMENTS / "claims"))


def load_experiment(name: str) -> ModuleType:
    """An ``experiments/<folder>/<script>.py`` script, named ``"<folder>/<script>"``, imported as a module (the
    folders are not packages)."""
    spec = importlib.util.spec_from_file_location(name.rpartition("/")[2], EXPERIMENTS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
