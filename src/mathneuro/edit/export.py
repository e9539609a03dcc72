"""Write an edited model out as a plain Hugging Face folder, so a useful edit can be kept.

:func:`export_model` saves the model *as it is in memory* (call it after the intervention and
before its undo) with ``save_pretrained`` (safetensors) plus the tokenizer and a short model
card. A GGUF-loaded model is written as a plain folder: its quantizer and
``quantization_config`` are dropped, since the weights in memory are already dequantised.
Neuron edits (LAPE) live in forward hooks that ``save_pretrained`` cannot see, so
:func:`neuron_edits_as_weights` turns them into the equivalent column edit of each MLP's
output projection (``down_proj(act * s) == (down_proj.weight * s on those columns)(act)``).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from torch import nn

from mathneuro.edit.undoable import apply_intervention
from mathneuro.methods.selection import Selection
from mathneuro.util.io import os_error_inside, publish_folder

MLP_OUTPUTS = ("down_proj", "fc2", "c_proj")  # the linear reading an MLP's activations


def neuron_edits_as_weights(model: nn.Module, selection: Selection) -> Selection:
    """The weight masks equivalent to ``selection``'s neuron edits: for each selected neuron of
    an MLP activation module, the matching input column of that MLP's output linear."""
    modules = dict(model.named_modules())
    masks: dict[str, torch.Tensor] = {}
    for name, idx in selection.neurons.items():
        parent_name = name.rsplit(".", 1)[0]
        parent = modules[parent_name]
        outs = [(n, m) for n, m in parent.named_children() if n in MLP_OUTPUTS and isinstance(m, nn.Linear)]
        if not outs:
            raise ValueError(f"export: cannot bake neuron edits of {name}: {parent_name} has no "
                             f"{'/'.join(MLP_OUTPUTS)} linear")
        out_name, out = outs[0]
        mask = torch.zeros(out.weight.shape, dtype=torch.bool)
        mask[:, idx.long().cpu()] = True
        masks[f"{parent_name}.{out_name}.weight"] = mask
    return Selection(masks=masks, meta={"from": "neurons"})


@contextmanager
def _plain_checkpoint(model: nn.Module):
    """While saving: no quantizer (GGUF loads are dequantised already), and untie the embeddings
    in the config if the input and output embeddings have come apart (so neither edit is lost)."""
    config = model.config
    saved: dict[str, Any] = {"hf_quantizer": getattr(model, "hf_quantizer", None)}
    if hasattr(config, "quantization_config"):
        saved["quantization_config"] = config.quantization_config
        delattr(config, "quantization_config")
    if hasattr(model, "hf_quantizer"):
        model.hf_quantizer = None
    tied_flag = getattr(config, "tie_word_embeddings", False)
    inp, out = model.get_input_embeddings(), model.get_output_embeddings()
    untie = bool(tied_flag and inp is not None and out is not None and out.weight is not inp.weight
                 and not torch.equal(out.weight.detach().cpu(), inp.weight.detach().cpu()))
    if untie:
        config.tie_word_embeddings = False
    try:
        yield
    finally:
        if untie:
            config.tie_word_embeddings = tied_flag
        if "quantization_config" in saved:
            config.quantization_config = saved["quantization_config"]
        if hasattr(model, "hf_quantizer"):
            model.hf_quantizer = saved["hf_quantizer"]


def model_card(card: dict) -> str:
    """A short README.md: what produced this model, then every card entry."""
    title = f"{card.get('model', 'model')} edited by mathneuro"
    lines = [f"# {title}", "",
             "An edited copy of the model: the weights selected by the method below were multiplied "
             "by the scalar (0 prunes them). Load it with "
             "`transformers.AutoModelForCausalLM.from_pretrained(<this folder>)`.", "",
             "| | |", "|---|---|"]
    for key, value in card.items():
        text = json.dumps(value) if isinstance(value, (dict, list)) else str(value)
        lines.append(f"| {key} | {text.replace('|', '/')} |")
    return "\n".join(lines) + "\n"


def export_model(model: nn.Module, tokenizer: Any, out_dir: str | os.PathLike, card: dict) -> Path:
    """Save ``model`` as it is now (safetensors), ``tokenizer`` and a model card to ``out_dir``.

    ``card`` names what produced the edit (model, method, top-K, scalar, data, seed, ...) and is
    also written as ``mathneuro_card.json``. Returns ``out_dir``.
    """
    out_dir = Path(out_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    for orphan in out_dir.parent.glob(f".{out_dir.name}.tmp-*"):  # a killed export's (the point's claim is ours)
        shutil.rmtree(orphan, ignore_errors=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.tmp-", dir=out_dir.parent))
    try:  # built aside and renamed into place: <out_dir> is a whole model or absent
        with _plain_checkpoint(model):
            model.save_pretrained(tmp, safe_serialization=True)
        config_path = tmp / "config.json"
        config = json.loads(config_path.read_text())
        if config.pop("quantization_config", None) is not None:
            config_path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
        if tokenizer is not None:
            tokenizer.save_pretrained(tmp)
        (tmp / "mathneuro_card.json").write_text(json.dumps(card, indent=2, default=str) + "\n")
        (tmp / "README.md").write_text(model_card(card))
        publish_folder(tmp, out_dir, replace=True)
    except OSError as exc:
        raise OSError(exc.errno, exc.strerror or str(exc), exc.filename or str(out_dir)) from None
    except Exception as exc:  # safetensors wraps a full disk in its own error
        os_error = os_error_inside(exc, out_dir)
        if os_error is None:
            raise
        raise os_error from exc
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out_dir


def export_edited_model(model: nn.Module, tokenizer: Any, selection: Selection, scalar: float,
                        out_dir: str | os.PathLike, card: dict) -> Path:
    """:func:`export_model` of a model whose ``selection`` is applied with ``scalar`` right now;
    neuron edits (hooks) are baked into the saved weights for the duration of the save."""
    if not selection.neurons:
        return export_model(model, tokenizer, out_dir, card)
    with apply_intervention(model, neuron_edits_as_weights(model, selection), scalar):
        return export_model(model, tokenizer, out_dir, card)
