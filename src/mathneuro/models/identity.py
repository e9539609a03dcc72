"""Which weights these are: a small JSON-able identity for cache keys and results."""

from __future__ import annotations

import hashlib
import json

import torch
from transformers import PreTrainedModel

from mathneuro.models.devices import _as_torch_dtype

_VOLATILE_CONFIG_KEYS = {"_name_or_path", "name_or_path", "transformers_version", "_commit_hash", "dtype",
                         "torch_dtype", "quantization_config", "_attn_implementation_autoset"}


def _config_hash(model: PreTrainedModel) -> str:
    cfg = {k: v for k, v in model.config.to_dict().items() if k not in _VOLATILE_CONFIG_KEYS}
    return hashlib.sha256(json.dumps(cfg, sort_keys=True, default=str).encode()).hexdigest()


def weights_fingerprint(model: torch.nn.Module, samples_per_tensor: int = 256) -> str:
    """sha256 over every parameter's name, shape and a strided sample of its values (as float32).

    Cheap (a few hundred values per tensor) and deterministic; tells apart models that share a
    name and config but not their weights, e.g. two random tiny models.
    """
    digest = hashlib.sha256()
    with torch.no_grad():
        for name, param in model.named_parameters():
            flat = param.detach().reshape(-1)
            stride = max(1, flat.numel() // samples_per_tensor)
            sample = flat[::stride][:samples_per_tensor].to(device="cpu", dtype=torch.float32).contiguous()
            digest.update(f"{name}:{tuple(param.shape)}:".encode())
            digest.update(sample.numpy().tobytes())
    return digest.hexdigest()


def model_identity(model: PreTrainedModel, name_or_path: str, dtype: str | torch.dtype | None = None) -> dict:
    """A small JSON-able description of exactly which weights these are (for cache keys and results).

    ``dtype`` is the requested one; the dtype recorded is the parameters' actual dtype, so ``auto``
    and what it resolved to give the same identity.
    """
    first = next(model.parameters(), None)
    actual = first.dtype if first is not None else _as_torch_dtype(dtype) or torch.float32
    return {
        "name": str(name_or_path),
        "class": type(model).__name__,
        "config_hash": _config_hash(model),
        "dtype": str(actual).replace("torch.", ""),
        "num_parameters": int(sum(p.numel() for p in model.parameters())),
        "weights_fingerprint": weights_fingerprint(model),
    }
