"""Load a causal LM and its tokenizer from a Hub id, a local folder, a ``.gguf`` file or ``embedded://``.

Everything downstream (statistics, selection, interventions) needs plain floating-point
``nn.Linear`` weights, so GGUF files are always dequantised. Dequantising takes 15-80 s, so a
GGUF is converted once into a plain safetensors folder in the mathneuro cache and that folder
is loaded from then on (a few seconds).

dtype policy (``dtype="auto"``):
  * GGUF sources: bfloat16 (float16 on a CUDA device without bfloat16). The weights are 4-8-bit
    grids anyway, and bfloat16 matmuls are 2-6x faster than float32 on CPU.
  * other checkpoints: the dtype their config records; float16 checkpoints load as bfloat16 on
    CPU (float16 CPU kernels are slow or missing); with no recorded dtype, float32 on CPU and
    bfloat16 on a GPU (float16 on a CUDA device without bfloat16).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import transformers
from transformers import (
    AutoConfig,
    AutoModelForCausalLM,
    AutoTokenizer,
    PreTrainedModel,
    PreTrainedTokenizerBase,
)

from mathneuro.embedded import EMBEDDED_SCHEME, cache_root, embedded_gguf_path

logger = logging.getLogger(__name__)

DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32,
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
}
ALLOWED_DTYPES = ("auto", *DTYPES)
ALLOWED_DEVICES = ("auto", "cpu", "cuda", "cuda:N", "mps")

_MARKER = "mathneuro_gguf_source.json"  # written last inside a conversion folder: marks it complete
_CONVERSION_FORMAT = 1  # bump to invalidate every cached conversion
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(/[\w.-]+)?$")


# --------------------------------------------------------------------------- devices and dtypes


def resolve_device(device: str | torch.device) -> torch.device:
    """Turn ``auto``/``cpu``/``cuda``/``cuda:N``/``mps`` into a torch.device (auto = cuda if available).

    Raises ValueError naming ``model.device`` for unknown values or an unavailable GPU.
    """
    if isinstance(device, torch.device):
        device = str(device)
    text = str(device).strip().lower()
    allowed = ", ".join(ALLOWED_DEVICES)
    if text == "auto":
        return torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")
    if text == "cpu":
        return torch.device("cpu")
    if text == "mps":
        mps = getattr(torch.backends, "mps", None)
        if mps is None or not mps.is_available():
            raise ValueError("model.device: 'mps' requested but Apple MPS is not available here; allowed: auto, cpu")
        return torch.device("mps")
    match = re.fullmatch(r"cuda(?::(\d+))?", text)
    if not match:
        raise ValueError(f"model.device: unknown device {device!r}; allowed: {allowed}")
    if not torch.cuda.is_available():
        raise ValueError(f"model.device: {device!r} requested but CUDA is not available here; allowed: auto, cpu")
    if match.group(1) is not None:
        index = int(match.group(1))
        count = torch.cuda.device_count()
        if index >= count:
            raise ValueError(f"model.device: {device!r} requested but only {count} CUDA device(s) exist")
        return torch.device("cuda", index)
    return torch.device("cuda")


def _as_torch_dtype(value: Any) -> torch.dtype | None:
    """A config's recorded dtype (torch.dtype or its name) as a torch.dtype, or None if unknown."""
    if isinstance(value, torch.dtype):
        return value
    if isinstance(value, str):
        return DTYPES.get(value.replace("torch.", ""))
    return None


def _check_dtype_name(dtype: str) -> str:
    text = str(dtype).strip().lower().replace("torch.", "")
    aliases = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16", "half": "float16", "float": "float32"}
    text = aliases.get(text, text)
    if text not in ALLOWED_DTYPES:
        raise ValueError(f"model.dtype: unknown dtype {dtype!r}; allowed: {', '.join(ALLOWED_DTYPES)}")
    return text


def resolve_dtype(
    dtype: str,
    device: str | torch.device,
    *,
    checkpoint_dtype: torch.dtype | str | None = None,
    gguf: bool = False,
) -> torch.dtype:
    """The torch dtype to load in: an explicit name as given, ``auto`` by the policy in the module docstring.

    ``checkpoint_dtype`` is the dtype the checkpoint's config records (if any); ``gguf`` marks a GGUF source.
    """
    name = _check_dtype_name(dtype)
    if name != "auto":
        return DTYPES[name]
    dev = resolve_device(device) if not isinstance(device, torch.device) else device
    accelerated = dev.type != "cpu"
    no_bf16 = dev.type == "cuda" and not torch.cuda.is_bf16_supported()
    low = torch.float16 if no_bf16 else torch.bfloat16
    if gguf:
        return low
    recorded = _as_torch_dtype(checkpoint_dtype)
    if recorded is not None:
        if recorded == torch.float16 and not accelerated:
            return torch.bfloat16
        return recorded
    return low if accelerated else torch.float32


# --------------------------------------------------------------------------- where the weights are


@dataclass(frozen=True)
class _Source:
    kind: str  # "gguf" or "pretrained"
    location: str  # gguf: the .gguf file; pretrained: a Hub id or a local folder


def _looks_local(text: str) -> bool:
    """True for strings that can only mean a path (so a missing one is an error, not a Hub id)."""
    if text.startswith(("/", "./", "../", "~", ".\\", "..\\")) or text in (".", ".."):
        return True
    if os.sep in text and text.count("/") > 1:
        return True
    return text.lower().endswith(".gguf") or not _HUB_ID.match(text)


def _gguf_in_folder(folder: Path, gguf_file: str | None) -> Path | None:
    if gguf_file:
        path = Path(gguf_file).expanduser()
        path = path if path.is_absolute() else folder / path
        if not path.is_file():
            raise ValueError(f"model.gguf_file: {path} does not exist")
        return path
    if (folder / "config.json").is_file():
        return None
    found = sorted(folder.glob("*.gguf"))
    if len(found) == 1:
        return found[0]
    if len(found) > 1:
        names = ", ".join(p.name for p in found)
        raise ValueError(f"model.gguf_file: {folder} holds several GGUF files ({names}); name one with model.gguf_file")
    raise ValueError(f"model.name_or_path: {folder} has neither a config.json nor a .gguf file")


def _resolve_source(name_or_path: str, gguf_file: str | None, cache_dir: str | None, revision: str | None) -> _Source:
    if not name_or_path or not str(name_or_path).strip():
        raise ValueError("model.name_or_path: empty; give a Hub id, a local folder, a .gguf file or embedded://smollm2-135m")
    text = str(name_or_path).strip()
    if text.startswith(EMBEDDED_SCHEME):
        return _Source("gguf", str(embedded_gguf_path(text[len(EMBEDDED_SCHEME):], cache_dir=cache_dir)))
    path = Path(text).expanduser()
    if path.is_file():
        if path.suffix.lower() != ".gguf":
            raise ValueError(f"model.name_or_path: {path} is a file but not a .gguf; give a folder or a .gguf file")
        return _Source("gguf", str(path))
    if path.is_dir():
        found = _gguf_in_folder(path, gguf_file)
        return _Source("gguf", str(found)) if found is not None else _Source("pretrained", str(path))
    if _looks_local(text):
        raise ValueError(f"model.name_or_path: local path {text!r} does not exist (resolved to {path.resolve()})")
    if gguf_file:  # a GGUF file inside a Hub repository
        from huggingface_hub import hf_hub_download

        try:
            return _Source("gguf", hf_hub_download(text, gguf_file, revision=revision))
        except Exception as exc:  # offline, missing repo or file: one message
            raise ValueError(f"model.name_or_path: cannot fetch {gguf_file!r} from Hub repo {text!r} ({exc})") from exc
    return _Source("pretrained", text)


# --------------------------------------------------------------------------- GGUF conversion cache


def _conversion_dir(gguf: Path, dtype: torch.dtype, cache_dir: str | None) -> Path:
    """The cache folder for ``gguf`` dequantised to ``dtype``: keyed by path, size, mtime, dtype, transformers."""
    st = gguf.stat()
    key = {
        "gguf": str(gguf.resolve()),
        "size": st.st_size,
        "mtime_ns": st.st_mtime_ns,
        "dtype": str(dtype).replace("torch.", ""),
        "transformers": transformers.__version__,
        "format": _CONVERSION_FORMAT,
    }
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:24]
    stem = re.sub(r"[^\w.-]+", "_", gguf.stem)[:60]
    return cache_root(cache_dir) / "models" / f"{stem}-{key['dtype']}-{digest}"


def _is_complete(folder: Path) -> bool:
    return (folder / _MARKER).is_file() and (folder / "config.json").is_file()


def _gguf_kwargs() -> dict[str, Any]:
    """Ask transformers to dequantise every GGUF weight (newer versions may otherwise keep packed blocks)."""
    try:
        from transformers.utils.quantization_config import GgufConfig
    except ImportError:  # older transformers always dequantises
        return {}
    return {"quantization_config": GgufConfig(dequantize=True)}


def _strip_quantization(model: PreTrainedModel) -> None:
    """Make a dequantised GGUF model a plain one that ``save_pretrained`` accepts."""
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        delattr(model.config, "quantization_config")


def _convert_gguf(gguf: Path, folder: Path, dtype: torch.dtype) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Dequantise ``gguf`` on CPU, save model + tokenizer into ``folder`` atomically, and return them."""
    logger.info("converting %s once to a plain %s folder %s (later loads reuse it)", gguf, dtype, folder)
    start = time.perf_counter()
    parent, name = str(gguf.parent), gguf.name
    tokenizer = AutoTokenizer.from_pretrained(parent, gguf_file=name)
    model = AutoModelForCausalLM.from_pretrained(parent, gguf_file=name, dtype=dtype, **_gguf_kwargs())
    _strip_quantization(model)
    _check_plain(model, str(gguf))
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{folder.name}-", dir=folder.parent))
    try:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        config_path = tmp / "config.json"
        config = json.loads(config_path.read_text())
        if config.pop("quantization_config", None) is not None:
            config_path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
        st = gguf.stat()
        marker = {
            "gguf": str(gguf.resolve()), "size": st.st_size, "mtime_ns": st.st_mtime_ns,
            "dtype": str(dtype).replace("torch.", ""), "transformers": transformers.__version__,
            "format": _CONVERSION_FORMAT, "seconds": round(time.perf_counter() - start, 2),
        }
        (tmp / _MARKER).write_text(json.dumps(marker, indent=2) + "\n")
        if folder.exists() and not _is_complete(folder):
            shutil.rmtree(folder, ignore_errors=True)  # leftovers of something that is not ours to trust
        try:
            os.rename(tmp, folder)
        except OSError:
            if not _is_complete(folder):  # lost a race to another process only if it finished
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    model.config.name_or_path = str(folder)
    return model, tokenizer


# --------------------------------------------------------------------------- loading


def _check_plain(model: PreTrainedModel, where: str) -> None:
    """Every parameter must be a float tensor: packed/quantised weights cannot be scored or edited."""
    bad = [n for n, p in model.named_parameters() if not p.dtype.is_floating_point]
    if bad:
        raise ValueError(
            f"model.name_or_path: {where} loaded with non-float (quantised) weights, e.g. {bad[0]} ; mathneuro "
            "needs plain float weights: use an unquantised checkpoint or a GGUF file (which is dequantised)"
        )


def _load_pretrained(
    location: str,
    dtype: torch.dtype,
    device: torch.device,
    device_map: str | None,
    revision: str | None,
    trust_remote_code: bool,
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    kwargs: dict[str, Any] = {"revision": revision, "trust_remote_code": trust_remote_code}
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
        if _is_complete(folder):
            model, tokenizer = _load_pretrained(str(folder), torch_dtype, torch_device, device_map, None, False)
        else:
            model, tokenizer = _convert_gguf(gguf, folder, torch_dtype)
            if device_map is not None:
                del model
                model, tokenizer = _load_pretrained(str(folder), torch_dtype, torch_device, device_map, None, False)
            elif torch_device.type != "cpu":
                model = model.to(torch_device)
    else:
        try:
            config = AutoConfig.from_pretrained(source.location, revision=revision, trust_remote_code=trust_remote_code)
        except OSError as exc:
            where = "local folder" if Path(source.location).exists() else "Hub id"
            raise ValueError(f"model.name_or_path: cannot load the config of {where} {source.location!r} ({exc})") from exc
        recorded = getattr(config, "dtype", None) or getattr(config, "torch_dtype", None)
        torch_dtype = resolve_dtype(dtype_name, torch_device, checkpoint_dtype=recorded)
        model, tokenizer = _load_pretrained(
            source.location, torch_dtype, torch_device, device_map, revision, trust_remote_code
        )
    _check_plain(model, str(name_or_path))
    _finish(model, tokenizer)
    return model, tokenizer


# --------------------------------------------------------------------------- identity


_VOLATILE_CONFIG_KEYS = {"_name_or_path", "name_or_path", "transformers_version", "_commit_hash", "dtype", "torch_dtype",
                         "quantization_config", "_attn_implementation_autoset"}


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
