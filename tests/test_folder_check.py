"""Model folders that transformers cannot load are refused before anything loads, with one line that
names the folder and what is missing; folders it can load pass (checked against transformers itself)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM, AutoTokenizer

from mathneuro.models.folder_check import folder_problem
from mathneuro.models.tiny import tiny_model
from mathneuro.pipeline.config import ConfigError
from mathneuro.pipeline.preflight import check_model_source
from tests.test_failures import error_line, write_gguf
from tests.test_runner import cli

KEY = "model.name_or_path"


@pytest.fixture(scope="module")
def tiny():
    return tiny_model("llama")


def save(tiny, folder: Path, **kwargs) -> Path:
    model, tok = tiny
    model.save_pretrained(folder, **kwargs)
    tok.save_pretrained(folder)
    return folder


def bin_checkpoint(tiny, folder: Path, shards: int) -> Path:
    """A folder with pytorch_model.bin (shards=1) or pytorch_model-0000i-of-0000n.bin + their index."""
    save(tiny, folder)
    state = load_file(str(folder / "model.safetensors"))
    (folder / "model.safetensors").unlink()
    if shards == 1:
        torch.save(state, folder / "pytorch_model.bin")
        return folder
    names = sorted(state)
    weight_map = {}
    for i in range(shards):
        shard = f"pytorch_model-{i + 1:05d}-of-{shards:05d}.bin"
        part = {n: state[n] for n in names[i::shards]}
        torch.save(part, folder / shard)
        weight_map.update(dict.fromkeys(part, shard))
    (folder / "pytorch_model.bin.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    return folder


def refused(folder: Path, trust_remote_code: bool = False) -> str:
    """The one-line refusal of ``folder`` (and the check's own reason is in it)."""
    with pytest.raises(ConfigError) as info:
        check_model_source(str(folder), trust_remote_code=trust_remote_code)
    line = str(info.value)
    assert "\n" not in line and line.startswith(f"{KEY}: model folder {str(folder)!r} cannot be loaded: ")
    return line


def transformers_loads(folder: Path) -> bool:
    try:
        AutoModelForCausalLM.from_pretrained(folder)
        AutoTokenizer.from_pretrained(folder)
    except Exception:  # noqa: BLE001 - whatever transformers raises: it could not load the folder
        return False
    return True


@pytest.mark.parametrize("layout", ["safetensors", "sharded_safetensors", "bin", "sharded_bin"])
def test_folders_transformers_loads_pass(tiny, tmp_path, layout):
    folder = tmp_path / layout
    if layout == "safetensors":
        save(tiny, folder)
    elif layout == "sharded_safetensors":
        save(tiny, folder, max_shard_size="20KB")
        assert len(list(folder.glob("model-*.safetensors"))) > 1
    else:
        bin_checkpoint(tiny, folder, 1 if layout == "bin" else 3)
    assert folder_problem(folder) is None
    check_model_source(str(folder))
    assert transformers_loads(folder)


@pytest.mark.parametrize("index", ["model.safetensors.index.json", "pytorch_model.bin.index.json"])
def test_a_sharded_index_with_a_missing_shard_is_refused(tiny, tmp_path, index):
    folder = tmp_path / "model"
    if index.startswith("model."):
        save(tiny, folder, max_shard_size="20KB")
    else:
        bin_checkpoint(tiny, folder, 3)
    shards = sorted(set(json.loads((folder / index).read_text())["weight_map"].values()))
    (folder / shards[1]).unlink()
    line = refused(folder)
    assert f"shard {shards[1]!r} named in {index} is missing (1 of {len(shards)} shards missing)" in line
    assert not transformers_loads(folder)


def test_a_damaged_index_is_refused(tiny, tmp_path):
    folder = save(tiny, tmp_path / "model", max_shard_size="20KB")
    (folder / "model.safetensors.index.json").write_text('{"metadata": {}}')
    assert "model.safetensors.index.json is damaged (no readable weight_map)" in refused(folder)


def test_a_folder_with_a_config_and_no_weights_is_refused_not_an_oserror(tiny, tmp_path):
    folder = save(tiny, tmp_path / "model")
    (folder / "model.safetensors").rename(tmp_path / "weights.safetensors")
    line = refused(folder)
    assert "no weights: none of model.safetensors, model.safetensors.index.json, pytorch_model.bin" in line
    assert not transformers_loads(folder)
    (tmp_path / "weights.safetensors").rename(folder / "weights.safetensors")  # a name transformers does not read
    assert not transformers_loads(folder)
    assert "found weights.safetensors, which transformers does not read under those names" in refused(folder)


def test_a_folder_without_config_json_is_refused(tiny, tmp_path):
    folder = save(tiny, tmp_path / "model")
    (folder / "config.json").unlink()
    assert refused(folder).endswith("no config.json (the model's architecture and sizes)")
    assert not transformers_loads(folder)


@pytest.mark.parametrize("change, expected", [
    (lambda c: "{not json", "config.json is not valid JSON"),
    (lambda c: json.dumps([1, 2]), "config.json is not a JSON object"),
    (lambda c: json.dumps({k: v for k, v in c.items() if k != "model_type"}), "config.json has no model_type"),
    (lambda c: json.dumps({**c, "model_type": "llamaa"}), "model_type 'llamaa', an architecture transformers"),
    (lambda c: json.dumps({**c, "model_type": "vit"}), "cannot load as a causal language model"),
])
def test_a_config_transformers_cannot_read_as_a_causal_lm_is_refused(tiny, tmp_path, change, expected):
    folder = save(tiny, tmp_path / "model")
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(change(config))
    assert expected in refused(folder)
    assert not transformers_loads(folder)


def test_custom_model_code_needs_trust_remote_code(tiny, tmp_path):
    folder = save(tiny, tmp_path / "model")
    config = json.loads((folder / "config.json").read_text())
    config.update(model_type="my_custom_lm", auto_map={"AutoConfig": "modeling_mine.MyConfig",
                                                       "AutoModelForCausalLM": "modeling_mine.MyLM"})
    (folder / "config.json").write_text(json.dumps(config))
    assert "set model.trust_remote_code=true if you trust that code" in refused(folder)
    check_model_source(str(folder), trust_remote_code=True)  # the user vouches for it: transformers decides


def test_a_folder_without_tokenizer_files_is_refused(tiny, tmp_path):
    folder = save(tiny, tmp_path / "model")
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        (folder / name).unlink(missing_ok=True)
    assert ("no tokenizer files (tokenizer.json, or a vocabulary such as tokenizer.model or vocab.json)"
            in refused(folder))
    assert not transformers_loads(folder)


def test_a_gguf_folder_is_not_read_as_a_transformers_folder(tmp_path):
    folder = tmp_path / "gguf"
    folder.mkdir()
    write_gguf(folder / "model.gguf")
    check_model_source(str(folder))  # no config.json needed: the GGUF is converted


@pytest.mark.integration
def test_the_cli_refuses_a_folder_without_weights_with_exit_2_and_one_line(tiny, tmp_path):
    folder = save(tiny, tmp_path / "model")
    (folder / "model.safetensors").unlink()
    shutil.rmtree(tmp_path / "cache", ignore_errors=True)
    res = cli([f"model.name_or_path={folder}", "model.name=x", "eval=none", "logger=none",
               f"cache_dir={tmp_path / 'cache'}", f"hydra.run.dir={tmp_path / 'out'}"], cwd=tmp_path, timeout=180)
    assert res.returncode == 2, res.stderr[-2000:]
    line = error_line(res)
    assert line == (f"mathneuro: error: {KEY}: model folder {str(folder)!r} cannot be loaded: no weights: none of "
                    "model.safetensors, model.safetensors.index.json, pytorch_model.bin, pytorch_model.bin.index.json")
    assert "Traceback" not in res.stderr and "OSError" not in res.stderr
