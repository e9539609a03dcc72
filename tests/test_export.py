"""An exported edited model loads as a plain Hugging Face folder and is exactly the edited model."""

from __future__ import annotations

import json

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from mathneuro.edit.export import export_edited_model, export_model
from mathneuro.edit.undoable import apply_intervention
from mathneuro.methods import random_selection
from mathneuro.methods.selection import Selection
from mathneuro.models.targets import find_mlp_activations, find_target_linears, weight_parameters
from mathneuro.models.tiny import tiny_model

from .conftest import TEXTS

CARD = {"model": "tiny", "method": "random", "top_k": 0.1, "scalar": 0.0, "task_data": "embedded_math",
        "seed": 0}


def logits(model, tok):
    batch = tok(TEXTS[:3], return_tensors="pt", padding=True)
    with torch.no_grad():
        return model(**batch).logits


def test_exported_pruned_model_has_zeros_exactly_at_the_selection_and_equal_logits(tmp_path):
    model, tok = tiny_model("qwen2")  # untied, with q/k/v biases
    weights = weight_parameters(find_target_linears(model))
    shapes = {n: w.shape for n, w in weights.items()}
    sel = random_selection(shapes, {n: w.numel() // 10 for n, w in weights.items()}, seed=3)
    assert all(bool((w != 0).all()) for w in weights.values())  # so zeros mark the selection only
    with apply_intervention(model, sel, 0.0):
        expected = logits(model, tok)
        out = export_model(model, tok, tmp_path / "model", CARD)
    loaded = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32).eval()
    params = dict(loaded.named_parameters())
    for name, mask in sel.masks.items():
        assert torch.equal(params[name] == 0, mask), name
    assert torch.equal(logits(loaded, AutoTokenizer.from_pretrained(out)), expected)
    assert list(out.glob("*.safetensors")) and not list(out.glob("*.bin"))
    readme = (out / "README.md").read_text()
    assert "random" in readme and "0.1" in readme and "embedded_math" in readme
    assert json.loads((out / "mathneuro_card.json").read_text())["top_k"] == 0.1


def test_edit_of_a_tied_lm_head_exports_consistently(tmp_path):
    model, tok = tiny_model("llama")  # lm_head tied to the embeddings
    assert model.lm_head.weight is model.get_input_embeddings().weight
    mask = torch.zeros_like(model.lm_head.weight, dtype=torch.bool)
    mask[5:40, :7] = True
    with apply_intervention(model, Selection(masks={"lm_head.weight": mask}), 0.0):
        expected = logits(model, tok)
        export_model(model, tok, tmp_path / "m", CARD)
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path / "m", dtype=torch.float32).eval()
    assert torch.equal(loaded.lm_head.weight == 0, mask)
    assert torch.equal(loaded.get_input_embeddings().weight == 0, mask)
    assert torch.equal(logits(loaded, tok), expected)


def test_untied_copies_of_a_tied_config_are_both_kept(tmp_path):
    model, tok = tiny_model("llama")
    model.lm_head.weight = torch.nn.Parameter(model.lm_head.weight.detach().clone() * 2)  # came apart
    expected = logits(model, tok)
    export_model(model, tok, tmp_path / "m", CARD)
    assert model.config.tie_word_embeddings  # the in-memory config is left as it was
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path / "m", dtype=torch.float32).eval()
    assert torch.equal(logits(loaded, tok), expected)


@pytest.mark.parametrize("scalar", [0.0, 1.5])
def test_neuron_edits_are_baked_into_the_exported_weights(tmp_path, scalar):
    model, tok = tiny_model("llama")
    acts = find_mlp_activations(model)
    sel = Selection(neurons={name: torch.tensor([1, 4, 9]) for name in acts}, method="lape")
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    with apply_intervention(model, sel, scalar):
        expected = logits(model, tok)
        export_edited_model(model, tok, sel, scalar, tmp_path / "m", CARD)
    assert all(torch.equal(p, before[n]) for n, p in model.named_parameters())  # baking was undone
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path / "m", dtype=torch.float32).eval()
    torch.testing.assert_close(logits(loaded, tok), expected, rtol=1e-5, atol=1e-5)
    assert not torch.allclose(logits(model, tok), expected)


def test_a_gguf_loaded_model_exports_as_a_plain_folder(tmp_path):
    from transformers.quantizers.auto import AutoHfQuantizer
    from transformers.utils.quantization_config import GgufConfig

    model, tok = tiny_model("llama")
    model.config.quantization_config = GgufConfig(dequantize=True)
    model.hf_quantizer = AutoHfQuantizer.from_config(model.config.quantization_config)
    expected = logits(model, tok)
    export_model(model, tok, tmp_path / "m", CARD)
    assert "quantization_config" not in json.loads((tmp_path / "m" / "config.json").read_text())
    assert model.hf_quantizer is not None and hasattr(model.config, "quantization_config")  # restored
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path / "m", dtype=torch.float32).eval()
    assert torch.equal(logits(loaded, tok), expected)


def test_export_model_key_writes_the_points_edited_model(tmp_path):
    from mathneuro.pipeline.runner import run_point

    model, tok = tiny_model("llama")
    folder = tmp_path / "tiny"
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from mathneuro.cli.run import config_dir, job_dirname
    from mathneuro.pipeline.config import register_configs

    register_configs()
    if not OmegaConf.has_resolver("mathneuro_dirname"):
        OmegaConf.register_new_resolver("mathneuro_dirname", job_dirname)
    with initialize_config_dir(config_dir=config_dir(), version_base="1.3"):
        composed = compose(config_name="config", overrides=[
            f"model.name_or_path={folder}", "model.name=tiny", "model.dtype=float32", "model.device=cpu",
            "eval=none", "logger=none", "progress=false", "num_samples=6", "max_length=48", "batch_size=4",
            "top_k=0.1", "save_selection=true", "export_model=true", f"cache_dir={tmp_path / 'cache'}"])
    cfg = OmegaConf.to_object(composed)
    results = run_point(cfg, tmp_path / "run")
    assert results["status"] == "complete" and "export" in results["timings"]
    sel = Selection.load(tmp_path / "run" / "selection.safetensors")
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path / "run" / "model", dtype=torch.float32)
    params = dict(loaded.named_parameters())
    for name, mask in sel.masks.items():
        assert torch.equal(params[name] == 0, mask), name
    card = json.loads((tmp_path / "run" / "model" / "mathneuro_card.json").read_text())
    assert card["method"] == "mathneuro" and card["top_k"] == 0.1 and card["seed"] == 0
