"""GGUF conversion cache: a GGUF is dequantised once into a plain safetensors folder and reloaded from there."""

from __future__ import annotations

import hashlib
import json
import logging
import re
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
import transformers
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

from mathneuro.models.embedded import cache_root
from mathneuro.util.io import publish_folder
from mathneuro.util.locking import FileLock

logger = logging.getLogger("mathneuro.models")

_MARKER = "mathneuro_gguf_source.json"  # written last inside a conversion folder: marks it complete
_CONVERSION_FORMAT = 1  # bump to invalidate every cached conversion


# Special tokens that end a generation wherever a GGUF's tokenizer has them. A GGUF records one eos id, while
# the model's own generation config may list several: Qwen2.5-Instruct's stops at <|im_end|> (the GGUF's eos)
# and at <|endoftext|>, which it emits after a few-shot answer. Without the second, every GSM8K answer ran on
# to the token limit with an invented next exchange. llama.cpp treats the same tokens as end of generation.
END_OF_GENERATION_TOKENS = ("<|endoftext|>", "<|im_end|>", "<|eot_id|>", "<|eom_id|>", "<|end_of_text|>",
                            "<|end|>", "<end_of_turn>", "<|return|>", "<｜end▁of▁sentence｜>")


def end_of_generation_ids(tokenizer: PreTrainedTokenizerBase) -> list[int]:
    """The tokenizer's eos id, then those of its other special end-of-text / end-of-turn tokens."""
    ids = [int(tokenizer.eos_token_id)] if tokenizer.eos_token_id is not None else []
    added = tokenizer.get_added_vocab()
    for token in END_OF_GENERATION_TOKENS:
        if token in added and int(added[token]) not in ids:
            ids.append(int(added[token]))
    return ids


def mark_end_of_generation(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase) -> None:
    """Let generation stop at every end-of-generation token of a GGUF model's tokenizer, not only its eos."""
    config = getattr(model, "generation_config", None)
    if config is None:
        return
    current = config.eos_token_id
    ids = [int(i) for i in (current if isinstance(current, (list, tuple)) else [current]) if i is not None]
    vocab = getattr(model.config, "vocab_size", None)  # a converter may add tokens the model cannot emit
    ids += [i for i in end_of_generation_ids(tokenizer) if i not in ids and (vocab is None or i < vocab)]
    if ids:
        config.eos_token_id = ids[0] if len(ids) == 1 else ids


def _check_plain(model: PreTrainedModel, where: str) -> None:
    """Every parameter must be a float tensor: packed/quantised weights cannot be scored or edited."""
    bad = [n for n, p in model.named_parameters() if not p.dtype.is_floating_point]
    if bad:
        raise ValueError(
            f"model.name_or_path: {where} loaded with non-float (quantised) weights, e.g. {bad[0]} ; mathneuro "
            "needs plain float weights: use an unquantised checkpoint or a GGUF file (which is dequantised)"
        )


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


def conversion_lock(folder: Path) -> FileLock:
    """A cross-process lock for converting into ``folder`` (kept alive by a heartbeat while converting)."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    return FileLock(folder.parent / f".{folder.name}.lock", stale_after=600.0)


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
            publish_folder(tmp, folder)  # mkdtemp's 700 would hide the conversion from the cache's other users
        except OSError:
            if not _is_complete(folder):  # lost a race to another process only if it finished
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    model.config.name_or_path = str(folder)
    return model, tokenizer
