"""Tiny, randomly initialised causal LMs of every supported architecture, built in-process.

They need no download and run in milliseconds on CPU, so tests exercise the real
transformers modules (attention, gated MLPs, norms) of each architecture we support.
"""

from __future__ import annotations

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast

ARCHITECTURES = ("llama", "qwen2", "gemma2", "gemma3", "phi")

_SPECIALS = ["<pad>", "<s>", "</s>"]


def byte_tokenizer(specials: tuple[str, str, str] = tuple(_SPECIALS)) -> PreTrainedTokenizerFast:
    """A real byte-level tokenizer (pad, bos, eos at ids 0-2, then 256 byte tokens), built offline.

    ``specials`` names the pad, bos and eos tokens (a model family's own names, e.g. Qwen's)."""
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    vocab = {tok: i for i, tok in enumerate(specials)}
    for ch in sorted(alphabet):
        vocab[ch] = len(vocab)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token=specials[0], bos_token=specials[1], eos_token=specials[2], unk_token=None
    )
    fast.padding_side = "right"
    return fast


def tiny_config(arch: str, vocab_size: int, **overrides):
    """The config of a 2-layer model of ``arch`` with small dimensions."""
    from transformers import Gemma2Config, Gemma3TextConfig, LlamaConfig, PhiConfig, Qwen2Config

    common = dict(
        vocab_size=vocab_size,
        hidden_size=32,
        intermediate_size=48,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
    )
    if arch == "llama":
        cfg = LlamaConfig(**common, tie_word_embeddings=True)
    elif arch == "qwen2":
        cfg = Qwen2Config(**common, tie_word_embeddings=False)
    elif arch == "gemma2":
        cfg = Gemma2Config(**common, head_dim=8, tie_word_embeddings=True)
    elif arch == "gemma3":
        cfg = Gemma3TextConfig(**common, head_dim=8, tie_word_embeddings=True)
    elif arch == "phi":
        common.pop("num_key_value_heads")
        cfg = PhiConfig(**common, tie_word_embeddings=False)
    else:
        raise ValueError(f"arch: unknown architecture {arch!r}; allowed: {', '.join(ARCHITECTURES)}")
    for key, value in overrides.items():
        setattr(cfg, key, value)
    return cfg


def tiny_model(arch: str = "llama", seed: int = 0, dtype: torch.dtype = torch.float32, **overrides):
    """Return ``(model, tokenizer)``: a tiny random model of ``arch`` in eval mode, and a byte tokenizer
    (``overrides``: config values, e.g. ``sliding_window``)."""
    tokenizer = byte_tokenizer()
    config = tiny_config(arch, vocab_size=len(tokenizer), **overrides)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    # Random init leaves some biases/norm weights at trivial values; perturb every parameter a
    # little so that scores have no accidental ties and every architecture is exercised fully.
    gen = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=gen, dtype=torch.float32).to(p.dtype) * 0.02)
    model.eval()
    return model, tokenizer
