"""The upstream parameter count: an untied lm_head is not counted where the upstream checkpoint ties it."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf
from transformers import AutoModelForCausalLM

from mathneuro.models.parameter_count import (
    untied_output_embedding_size,
    upstream_fractions,
    upstream_parameter_count,
)
from mathneuro.models.tiny import tiny_config, tiny_model
from mathneuro.pipeline.runner import run_point
from tests.test_runner import base_overrides, compose_cfg


def _tied_twin(untied):
    """The same architecture as ``untied`` with lm_head tied to the input embeddings."""
    cfg = tiny_config("qwen2", untied.config.vocab_size)
    cfg.tie_word_embeddings = True
    return AutoModelForCausalLM.from_config(cfg)


def test_an_untied_lm_head_is_left_out_only_when_the_upstream_ties_it():
    model, _ = tiny_model("qwen2")  # untied lm_head, as a GGUF with output.weight loads
    total = sum(p.numel() for p in model.parameters())
    head = model.get_output_embeddings().weight.numel()
    assert untied_output_embedding_size(model) == head > 0
    assert upstream_parameter_count(model, tied_upstream=True) == total - head
    assert upstream_parameter_count(model, tied_upstream=False) == total
    tied = _tied_twin(model)  # what the upstream checkpoint is: embeddings counted once
    assert upstream_parameter_count(model, tied_upstream=True) == sum(p.numel() for p in tied.parameters())


def test_a_model_that_already_ties_is_counted_as_it_is():
    model, _ = tiny_model("llama")  # tied: lm_head.weight is embed_tokens.weight
    total = sum(p.numel() for p in model.parameters())
    assert untied_output_embedding_size(model) == 0
    assert upstream_parameter_count(model, tied_upstream=True) == total


def test_fractions_use_the_upstream_count_and_are_absent_when_unknown():
    model, _ = tiny_model("qwen2")
    upstream = upstream_parameter_count(model, tied_upstream=True)
    out = upstream_fractions({"num_selected": 100, "num_weights_edited": 50}, model, True)
    assert out == {"num_parameters_upstream": upstream, "fraction_of_model_upstream": 100 / upstream,
                   "fraction_of_model_edited_upstream": 50 / upstream}
    assert upstream_fractions({"num_selected": 100}, model, None) == {}


@pytest.mark.integration
def test_results_offer_the_upstream_denominator_beside_the_loaded_one(tmp_path):
    model, tok = tiny_model("qwen2")
    model.save_pretrained(tmp_path / "qwen2")
    tok.save_pretrained(tmp_path / "qwen2")
    base = [*base_overrides(tmp_path / "qwen2", tmp_path / "cache"), "eval=none", "logger=none", "top_k=0.2"]
    plain = run_point(OmegaConf.to_object(compose_cfg(base)), tmp_path / "plain")["selection"]
    tied = run_point(OmegaConf.to_object(compose_cfg([*base, "model.tied_embeddings_upstream=true"])),
                     tmp_path / "tied")["selection"]
    assert "fraction_of_model_upstream" not in plain
    head = model.get_output_embeddings().weight.numel()
    assert tied["num_parameters"] == plain["num_parameters"]  # the loaded count stays as it was
    assert tied["fraction_of_model"] == plain["fraction_of_model"]
    assert tied["num_parameters_upstream"] == tied["num_parameters"] - head
    assert tied["fraction_of_model_upstream"] == pytest.approx(tied["num_selected"] / (tied["num_parameters"] - head))
    assert tied["fraction_of_model_upstream"] > tied["fraction_of_model"]
