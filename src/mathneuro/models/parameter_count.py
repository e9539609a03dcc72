"""How many parameters the model has *upstream*, where the loaded copy stores a tied matrix twice.

A GGUF file may hold ``output.weight`` beside ``token_embd.weight`` even when the upstream checkpoint ties
its output projection to the input embeddings (Qwen2.5-Coder-0.5B and -1.5B: ``tie_word_embeddings``
true). Loaded from such a file the model has an untied ``lm_head``, and counting its parameters counts the
embedding matrix twice. ``model.tied_embeddings_upstream: true`` says so; the runner then also reports the
selection as a share of the upstream count (``selection.num_parameters_upstream``,
``fraction_of_model_upstream``, ``fraction_of_model_edited_upstream``).
"""

from __future__ import annotations

import torch


def untied_output_embedding_size(model: torch.nn.Module) -> int:
    """Elements of the output projection when it is a tensor of its own (0 when it is the input
    embedding's, when the model has no output embedding, or when the two differ in shape)."""
    get_out = getattr(model, "get_output_embeddings", None)
    get_in = getattr(model, "get_input_embeddings", None)
    if get_out is None or get_in is None:
        return 0
    out, emb = get_out(), get_in()
    w_out, w_in = getattr(out, "weight", None), getattr(emb, "weight", None)
    if w_out is None or w_in is None or w_out is w_in or w_out.shape != w_in.shape:
        return 0
    return int(w_out.numel())


def upstream_parameter_count(model: torch.nn.Module, tied_upstream: bool) -> int:
    """The model's parameters as the upstream checkpoint counts them: each tensor once, and, when the upstream
    ties its embeddings (``tied_upstream``), an untied output projection not at all."""
    total = sum(p.numel() for p in model.parameters())  # shared tensors appear once
    return int(total - (untied_output_embedding_size(model) if tied_upstream else 0))


def upstream_fractions(summary: dict, model: torch.nn.Module, tied_upstream: bool | None) -> dict:
    """The upstream-denominator fields for a selection summary (empty unless ``tied_upstream`` is set)."""
    if tied_upstream is None:
        return {}
    upstream = upstream_parameter_count(model, bool(tied_upstream))
    out: dict = {"num_parameters_upstream": upstream}
    for key, count_key in (("fraction_of_model_upstream", "num_selected"),
                           ("fraction_of_model_edited_upstream", "num_weights_edited")):
        count = summary.get(count_key)
        out[key] = count / upstream if isinstance(count, (int, float)) and upstream else None
    return out
