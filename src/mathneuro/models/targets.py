"""Which modules are scored: the linears inside decoder blocks, and the MLP activation modules.

Names are the model's own module names (``model.layers.3.self_attn.q_proj``); a
selection addresses parameters as ``<module>.weight``.
"""

from __future__ import annotations

import re
import warnings

import torch
from torch import nn

#: Any ``nn.Linear`` inside a numbered decoder block (``layers.N``, ``h.N`` or ``blocks.N``).
DEFAULT_PATTERN = r"(^|\.)(layers|h|blocks)\.\d+\."

#: Names of MLP activation modules LAPE hooks (gated MLPs: ``act_fn``; phi-style: ``activation_fn``).
ACTIVATION_NAMES = ("act_fn", "activation_fn")


def find_target_linears(
    model: nn.Module, pattern: str = DEFAULT_PATTERN, include_lm_head: bool = False
) -> dict[str, nn.Linear]:
    """Return ``{module name: nn.Linear}`` for every linear whose name matches ``pattern``.

    ``lm_head`` is added only when ``include_lm_head``; if it is tied to the input
    embeddings a warning says that editing it edits the embeddings too.
    """
    try:
        regex = re.compile(pattern)
    except re.error as exc:
        raise ValueError(f"targets.pattern: not a valid regular expression ({exc}): {pattern!r}") from exc
    found = {
        name: mod for name, mod in model.named_modules() if isinstance(mod, nn.Linear) and regex.search(name)
    }
    if include_lm_head:
        head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
        if isinstance(head, nn.Linear):
            head_name = next(n for n, m in model.named_modules() if m is head)
            found[head_name] = head
            emb = model.get_input_embeddings() if hasattr(model, "get_input_embeddings") else None
            if emb is not None and emb.weight is head.weight:
                warnings.warn(
                    f"{head_name} is tied to the input embeddings: scoring or editing it edits the embeddings too",
                    stacklevel=2,
                )
    if not found:
        raise ValueError(
            f"targets.pattern: no nn.Linear of {type(model).__name__} matches {pattern!r}"
        )
    return found


def find_mlp_activations(model: nn.Module) -> dict[str, nn.Module]:
    """Return ``{module name: activation module}`` for the MLP of every decoder block.

    The activation's output is the intermediate neuron vector: ``act(gate_proj(x))`` for
    gated MLPs, ``act(fc1(x))`` otherwise. Raises ``ValueError`` when none is found.
    """
    block = re.compile(DEFAULT_PATTERN)
    found: dict[str, nn.Module] = {}
    for name, mod in model.named_modules():
        parent, _, leaf = name.rpartition(".")
        if leaf in ACTIVATION_NAMES and parent.endswith("mlp") and block.search(name):
            if isinstance(mod, nn.Module) and not isinstance(mod, nn.Linear):
                found[name] = mod
    if not found:
        raise ValueError(
            f"method=lape: {type(model).__name__} has no MLP activation module it understands "
            f"(looked for mlp.{' / mlp.'.join(ACTIVATION_NAMES)} inside decoder blocks)"
        )
    return found


def base_model(model: nn.Module) -> nn.Module:
    """The decoder without the LM head, so scoring passes never compute vocabulary logits."""
    prefix = getattr(model, "base_model_prefix", "")
    inner = getattr(model, prefix, None) if prefix else None
    return inner if isinstance(inner, nn.Module) else model


def weight_parameters(targets: dict[str, nn.Linear]) -> dict[str, torch.Tensor]:
    """``{"<module>.weight": weight}`` for the given target linears."""
    return {f"{name}.weight": mod.weight for name, mod in targets.items()}


def weights_fingerprint(weights: dict[str, torch.Tensor]) -> tuple:
    """A cheap fingerprint of the weights' contents (per tensor, the sum of its bit patterns): it changes
    when an edit prunes or scales any weight, so nothing remembered about a selection outlives an edit."""
    out = []
    for name, weight in sorted(weights.items()):
        flat = weight.detach().reshape(-1)
        size = flat.element_size()
        if size == 2 and flat.numel() % 2 == 0:
            bits = flat.view(torch.int32)  # two 16-bit weights per word: twice as fast as summing int16
        else:
            bits = flat.view({1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[size])
        out.append((name, tuple(weight.shape), str(weight.dtype), int(bits.sum(dtype=torch.int64))))
    return tuple(out)


def _mlp_output_shape(mlp: nn.Module) -> tuple[int, int]:
    """``(neurons, hidden size)`` of an MLP's output linear; ``(0, 0)`` when it has none we know."""
    for name, mod in mlp.named_children():
        if name in ("down_proj", "fc2", "c_proj") and isinstance(mod, nn.Linear):
            return mod.in_features, mod.out_features
    return 0, 0


def mlp_widths(model: nn.Module) -> dict[str, int]:
    """``{activation module name: number of MLP neurons}`` — the input width of the MLP's output linear."""
    modules = dict(model.named_modules())
    return {name: _mlp_output_shape(modules[name.rsplit(".", 1)[0]])[0] for name in find_mlp_activations(model)}


def neuron_weight_counts(model: nn.Module) -> dict[str, int]:
    """``{activation module name: weights one of its neurons feeds}`` — the hidden size of the MLP's output
    projection: scaling a neuron's activation scales that many weights (one column of it)."""
    modules = dict(model.named_modules())
    return {name: _mlp_output_shape(modules[name.rsplit(".", 1)[0]])[1] for name in find_mlp_activations(model)}
