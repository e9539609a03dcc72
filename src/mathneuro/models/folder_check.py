"""Is a local model folder loadable? Checked the way transformers will read it, before anything loads.

``AutoModelForCausalLM.from_pretrained(folder)`` reads ``config.json`` (its ``model_type`` names the
architecture), then the first of ``model.safetensors``, ``model.safetensors.index.json``,
``pytorch_model.bin``, ``pytorch_model.bin.index.json`` (an index names the shard files), and
``AutoTokenizer`` reads ``tokenizer.json`` or a vocabulary file. A folder missing any of these fails
minutes later with a raw ``OSError``; :func:`folder_problem` says what is missing in one line instead.
It reads only ``config.json`` and the index files, so it takes milliseconds.
"""

from __future__ import annotations

import json
from pathlib import Path

from transformers.models.auto.configuration_auto import CONFIG_MAPPING
from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES
from transformers.utils import SAFE_WEIGHTS_INDEX_NAME, SAFE_WEIGHTS_NAME, WEIGHTS_INDEX_NAME, WEIGHTS_NAME

CONFIG_NAME = "config.json"
#: The weight files transformers looks for in a folder, in the order it looks for them.
WEIGHT_FILES = (SAFE_WEIGHTS_NAME, SAFE_WEIGHTS_INDEX_NAME, WEIGHTS_NAME, WEIGHTS_INDEX_NAME)
#: Files a tokenizer can be built from: the fast tokenizer's file, or a slow tokenizer's vocabulary.
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "spiece.model", "sentencepiece.bpe.model", "vocab.json",
                   "vocab.txt", "tekken.json", "tiktoken.model")


def config_problem(folder: Path, trust_remote_code: bool) -> str | None:
    """What keeps transformers from reading ``config.json`` as a causal LM it knows, or None."""
    path = folder / CONFIG_NAME
    if not path.is_file():
        return f"no {CONFIG_NAME} (the model's architecture and sizes)"
    try:
        config = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        return f"{CONFIG_NAME} is not valid JSON ({' '.join(str(exc).split())})"
    if not isinstance(config, dict):
        return f"{CONFIG_NAME} is not a JSON object"
    custom = isinstance(config.get("auto_map"), dict) and "AutoModelForCausalLM" in config["auto_map"]
    model_type = config.get("model_type")
    if model_type in CONFIG_MAPPING:
        if model_type in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES or (custom and trust_remote_code):
            return None
        return (f"{CONFIG_NAME} has model_type {model_type!r}, which transformers cannot load as a causal "
                "language model (AutoModelForCausalLM)")
    if custom:
        if trust_remote_code:
            return None
        return (f"{CONFIG_NAME} names custom model code (auto_map) for model_type {model_type!r}, which "
                "transformers does not know; set model.trust_remote_code=true if you trust that code")
    if not model_type:
        return f"{CONFIG_NAME} has no model_type (the architecture transformers should build)"
    import transformers

    return (f"{CONFIG_NAME} has model_type {model_type!r}, an architecture transformers {transformers.__version__} "
            "does not know (a newer transformers, or model.trust_remote_code=true with custom code, may)")


def _index_problem(folder: Path, index: str) -> str | None:
    """What is wrong with the shard index ``index`` (unreadable, or a shard it names is missing), or None."""
    try:
        weight_map = json.loads((folder / index).read_text())["weight_map"]
        shards = sorted(set(weight_map.values()))
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError, AttributeError):
        return f"{index} is damaged (no readable weight_map)"
    if not shards:
        return f"{index} names no shard files"
    missing = [s for s in shards if not (folder / s).is_file()]
    if missing:
        return (f"shard {missing[0]!r} named in {index} is missing ({len(missing)} of {len(shards)} shards "
                "missing)")
    return None


def weights_problem(folder: Path) -> str | None:
    """What keeps transformers from finding the weights, or None (the file it would read is there; an
    index's every shard is there)."""
    for name in WEIGHT_FILES:
        if (folder / name).is_file():
            return _index_problem(folder, name) if name.endswith(".index.json") else None
    others = sorted(p.name for p in folder.iterdir() if p.suffix in (".safetensors", ".bin", ".pt", ".pth"))
    found = f"; found {', '.join(others[:3])}, which transformers does not read under those names" if others else ""
    return f"no weights: none of {', '.join(WEIGHT_FILES)}{found}"


def tokenizer_problem(folder: Path) -> str | None:
    """What keeps AutoTokenizer from building a tokenizer from the folder, or None."""
    if any((folder / name).is_file() for name in TOKENIZER_FILES) or any(folder.glob("*.tiktoken")):
        return None
    return "no tokenizer files (tokenizer.json, or a vocabulary such as tokenizer.model or vocab.json)"


def folder_problem(folder: str | Path, trust_remote_code: bool = False) -> str | None:
    """The first reason transformers cannot load ``folder`` as a causal LM with its tokenizer, or None."""
    folder = Path(folder)
    return (config_problem(folder, trust_remote_code) or weights_problem(folder) or tokenizer_problem(folder))
