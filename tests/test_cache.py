"""A second identical request hits the cache and runs no forward pass; any input change misses."""

import torch

from mathneuro.models.tiny import tiny_model
from mathneuro.statistics.cache import StatisticsCache, cached_statistics

from .conftest import TEXTS

IDENTITY = {"name": "tiny-llama", "dtype": "float32"}


def count_forwards(model):
    calls = {"n": 0}
    model.model.register_forward_pre_hook(lambda *_: calls.__setitem__("n", calls["n"] + 1))
    return calls


def test_second_request_hits_disk_cache_without_forward(tmp_path):
    model, tok = tiny_model("llama")
    calls = count_forwards(model)
    cache = StatisticsCache(tmp_path)
    first, keys = cached_statistics(cache, model, tok, TEXTS, model_identity=IDENTITY,
                                    kinds=("linear_inputs", "activation_counts"), batch_size=4, progress=False)
    n = calls["n"]
    assert n > 0 and cache.misses == 2
    fresh = StatisticsCache(tmp_path)  # a new process: nothing in memory
    second, keys2 = cached_statistics(fresh, model, tok, TEXTS, model_identity=IDENTITY,
                                      kinds=("linear_inputs", "activation_counts"), batch_size=2, progress=False)
    assert calls["n"] == n and fresh.hits == 2 and fresh.misses == 0
    assert keys == keys2
    for kind in first:
        assert first[kind].num_tokens == second[kind].num_tokens
        for k, v in first[kind].tensors.items():
            assert torch.equal(v, second[kind].tensors[k])


def test_key_changes_with_every_input(tmp_path):
    model, tok = tiny_model("llama")
    cache = StatisticsCache(tmp_path)
    base = dict(model_identity=IDENTITY, kinds=("linear_inputs",), progress=False)
    _, k0 = cached_statistics(cache, model, tok, TEXTS, **base)
    _, k1 = cached_statistics(cache, model, tok, TEXTS[:-1], **base)
    _, k2 = cached_statistics(cache, model, tok, TEXTS, **{**base, "model_identity": {**IDENTITY, "dtype": "bf16"}})
    _, k3 = cached_statistics(cache, model, tok, TEXTS, max_length=8, **base)
    _, k4 = cached_statistics(cache, model, tok, list(reversed(TEXTS)), **base)
    keys = {k0["linear_inputs"], k1["linear_inputs"], k2["linear_inputs"], k3["linear_inputs"], k4["linear_inputs"]}
    assert len(keys) == 5


def test_half_written_entry_counts_as_absent(tmp_path):
    model, tok = tiny_model("llama")
    cache = StatisticsCache(tmp_path)
    _, keys = cached_statistics(cache, model, tok, TEXTS, model_identity=IDENTITY, kinds=("linear_inputs",),
                                progress=False)
    (tmp_path / f"{keys['linear_inputs']}.json").unlink()
    assert StatisticsCache(tmp_path).load(keys["linear_inputs"]) is None
