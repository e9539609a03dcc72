"""``load_model``: ``(model, tokenizer)`` from any source, in eval mode, gradients off, with a pad token."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import torch
from transformers import (
    AutoConfig,
    AutoModelForCausalLM,
    AutoTokenizer,
    PreTrainedModel,
    PreTrainedTokenizerBase,
)

from mathneuro.models import gguf as conversion
from mathneuro.models.devices import _check_dtype_name, resolve_device, resolve_dtype, slow_dtype_warning
from mathneuro.models.gguf import _check_plain, _conversion_dir, _is_complete, conversion_lock
from mathneuro.models.hub import hub_access
from mathneuro.models.sources import _resolve_source


def _load_pretrained(
    location: str,
    dtype: torch.dtype,
    device: torch.device,
    device_map: str | None,
    revision: str | None,
    trust_remote_code: bool,
    local_only: bool = False,
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    kwargs: dict[str, Any] = {"revision": revision, "trust_remote_code": trust_remote_code}
    if local_only:  # a Hub id the Hub cannot be asked about: its cached copy, without a retry
        kwargs["local_files_only"] = True
    if device_map is not None:
        placement: Any = device_map
    elif device.type != "cpu":
        placement = str(device)
    else:
        placement = None
    model = AutoModelForCausalLM.from_pretrained(location, dtype=dtype, device_map=placement, **kwargs)
    try:
        tokenizer = AutoTokenizer.from_pretrained(location, **kwargs)
    except (OSError, ValueError, TypeError) as exc:
        raise ValueError(f"model.name_or_path: no usable tokenizer at {location!r} ({exc})") from exc
    return model, tokenizer


_warned_dtypes: set[tuple[str, str]] = set()


def _warn_slow_dtype(dtype: torch.dtype, device: torch.device) -> None:
    """Say once per process and (dtype, device) when the dtype is emulated and slow there."""
    key = (str(dtype), str(device))
    message = slow_dtype_warning(dtype, device) if key not in _warned_dtypes else None
    if message:
        _warned_dtypes.add(key)
        logging.getLogger("mathneuro.models").warning(message)


def _finish(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase) -> None:
    """Eval mode, no gradients, and a pad token (eos if missing) on this tokenizer/model only."""
    model.eval()
    model.requires_grad_(False)
    if tokenizer.pad_token is None:
        for candidate in (tokenizer.eos_token, tokenizer.unk_token, tokenizer.bos_token):
            if candidate is not None:
                tokenizer.pad_token = candidate
                break
        else:
            raise ValueError("model.name_or_path: the tokenizer has no pad, eos, unk or bos token to pad with")
    generation_config = getattr(model, "generation_config", None)
    if generation_config is not None and generation_config.pad_token_id is None:
        generation_config.pad_token_id = tokenizer.pad_token_id


def load_model(
    name_or_path: str,
    *,
    gguf_file: str | None = None,
    dtype: str = "auto",
    device: str = "auto",
    cache_dir: str | None = None,
    revision: str | None = None,
    trust_remote_code: bool = False,
    device_map: str | None = None,
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Load ``(model, tokenizer)`` in eval mode with gradients off.

    ``name_or_path``: a Hub id, a local folder (plain, or holding one ``.gguf`` / the one named by
    ``gguf_file``), a ``.gguf`` file, or ``embedded://smollm2-135m``. A Hub id with ``gguf_file``
    fetches that GGUF from the repository. GGUF sources are dequantised once into
    ``<cache root>/models/<name>-<dtype>-<key>`` (cache root: ``cache_dir``, ``$MATHNEURO_CACHE``
    or ``~/.cache/mathneuro``; not the Hugging Face cache) and reloaded from there.
    ``device_map`` (e.g. ``"auto"``) is passed to transformers instead of placing on ``device``.
    """
    dtype_name = _check_dtype_name(dtype)
    torch_device = resolve_device(device)
    source = _resolve_source(name_or_path, gguf_file, cache_dir, revision)
    if source.kind == "gguf":
        gguf = Path(source.location)
        torch_dtype = resolve_dtype(dtype_name, torch_device, gguf=True)
        folder = _conversion_dir(gguf, torch_dtype, cache_dir)
        converted = None
        if not _is_complete(folder):
            # processes of one sweep starting together convert once: the others wait, then reload
            with conversion_lock(folder):
                if not _is_complete(folder):
                    converted = conversion._convert_gguf(gguf, folder, torch_dtype)
        if converted is not None and device_map is None:
            model, tokenizer = converted
            if torch_device.type != "cpu":
                model = model.to(torch_device)
        else:  # converted by another process, or a device_map load that places the weights itself
            converted = None  # drop this process's converted copy before reading the folder again
            model, tokenizer = _load_pretrained(str(folder), torch_dtype, torch_device, device_map, None, False)
        conversion.mark_end_of_generation(model, tokenizer)
    else:
        local = Path(source.location).exists()
        local_only = False if local else hub_access(source.location, revision)  # refuses an unreachable id at once
        try:
            config = AutoConfig.from_pretrained(source.location, revision=revision, trust_remote_code=trust_remote_code,
                                                **({"local_files_only": True} if local_only else {}))
        except OSError as exc:
            where = "local folder" if local else "Hub id"
            raise ValueError(f"model.name_or_path: cannot load the config of {where} {source.location!r} "
                             f"({exc})") from exc
        recorded = getattr(config, "dtype", None) or getattr(config, "torch_dtype", None)
        torch_dtype = resolve_dtype(dtype_name, torch_device, checkpoint_dtype=recorded)
        model, tokenizer = _load_pretrained(
            source.location, torch_dtype, torch_device, device_map, revision, trust_remote_code, local_only
        )
    _check_plain(model, str(name_or_path))
    _warn_slow_dtype(torch_dtype, torch_device)
    _finish(model, tokenizer)
    return model, tokenizer
