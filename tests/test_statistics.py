"""Batched, padded statistics equal a per-sample, unpadded reference computation."""

import pytest
import torch

from mathneuro.models.targets import base_model, find_mlp_activations, find_target_linears
from mathneuro.models.tiny import ARCHITECTURES, tiny_model
from mathneuro.statistics.passes import collect_statistics, length_sorted_batches

from .conftest import TEXTS


def reference_statistics(model, tokenizer, texts):
    """One sample at a time, no padding: norm, sq per linear input column and LAPE counts."""
    targets = find_target_linears(model)
    acts = find_mlp_activations(model)
    norm = {n: torch.zeros(m.in_features, dtype=torch.float64) for n, m in targets.items()}
    sq = {n: torch.zeros(m.in_features, dtype=torch.float64) for n, m in targets.items()}
    pos = {n: None for n in acts}
    tokens = 0
    for text in texts:
        enc = tokenizer(text, return_tensors="pt")
        seen = {}
        handles = [m.register_forward_pre_hook(lambda _m, a, n=n, seen=seen: seen.__setitem__(n, a[0][0]))
                   for n, m in targets.items()]
        handles += [m.register_forward_hook(lambda _m, _a, o, n=n, seen=seen: seen.__setitem__(n, o[0]))
                    for n, m in acts.items()]
        with torch.no_grad():
            base_model(model)(**enc)
        for h in handles:
            h.remove()
        for n in targets:
            x = seen[n].double()
            norm[n] += x.norm(dim=0)
            sq[n] += (x * x).sum(dim=0)
        for n in acts:
            c = (seen[n] > 0).sum(dim=0)
            pos[n] = c if pos[n] is None else pos[n] + c
        tokens += enc["input_ids"].shape[1]
    return norm, sq, pos, tokens


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_batched_padded_statistics_match_per_sample_reference(arch):
    model, tok = tiny_model(arch)
    stats = collect_statistics(model, tok, TEXTS, kinds=("linear_inputs", "activation_counts"), batch_size=3,
                               progress=False)
    norm, sq, pos, tokens = reference_statistics(model, tok, TEXTS)
    lin = stats["linear_inputs"]
    assert set(lin.modules()) == set(norm)
    for name in norm:
        torch.testing.assert_close(lin.get(name, "norm").double(), norm[name], rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(lin.get(name, "sq").double(), sq[name], rtol=1e-5, atol=1e-5)
    assert lin.num_samples == len(TEXTS) and lin.num_tokens == tokens
    lape = stats["activation_counts"]
    for name in pos:
        assert torch.equal(lape.get(name, "positive"), pos[name].to(torch.int64))
    assert lape.num_tokens == tokens


def test_batch_size_does_not_change_statistics():
    model, tok = tiny_model("llama")
    a = collect_statistics(model, tok, TEXTS, batch_size=1, progress=False)["linear_inputs"]
    b = collect_statistics(model, tok, TEXTS, batch_size=4, progress=False)["linear_inputs"]
    for key in a.tensors:
        torch.testing.assert_close(a.tensors[key], b.tensors[key], rtol=1e-5, atol=1e-6)


def test_bfloat16_model_accumulates_in_float32():
    # batch_size=1 sees exactly the activations of the reference, so only accumulation differs:
    # 140 bf16 additions would drift by ~1e-2 relative, float32 stays at ~1e-6.
    model, tok = tiny_model("llama", dtype=torch.bfloat16)
    texts = TEXTS * 20
    stats = collect_statistics(model, tok, texts, batch_size=1, progress=False)["linear_inputs"]
    assert all(t.dtype == torch.float32 for t in stats.tensors.values())
    norm, _, _, _ = reference_statistics(model, tok, texts)
    for name, ref in norm.items():
        torch.testing.assert_close(stats.get(name, "norm").double(), ref, rtol=2e-6, atol=1e-5)


def test_hooks_are_removed_even_on_error():
    model, tok = tiny_model("llama")
    targets = find_target_linears(model)

    class Boom(Exception):
        pass

    def explode(*_):
        raise Boom

    handle = targets["model.layers.1.mlp.down_proj"].register_forward_pre_hook(explode)
    with pytest.raises(Boom):
        collect_statistics(model, tok, TEXTS, progress=False)
    handle.remove()
    assert all(not m._forward_pre_hooks and not m._forward_hooks for m in model.modules())


def test_length_sorted_batches_cover_every_sample_once():
    lengths = [5, 1, 9, 9, 3, 7, 2]
    batches = length_sorted_batches(lengths, 3)
    flat = [i for b in batches for i in b]
    assert sorted(flat) == list(range(len(lengths)))
    assert [lengths[i] for i in flat] == sorted(lengths, reverse=True)


def test_bad_arguments_are_refused():
    model, tok = tiny_model("llama")
    with pytest.raises(ValueError, match="kind"):
        collect_statistics(model, tok, TEXTS, kinds=("nope",))
    with pytest.raises(ValueError, match="no samples"):
        collect_statistics(model, tok, [])


def test_compiled_kernel_equals_eager_reference():
    """The fused (torch.compile) reduction gives the eager numbers, padding excluded."""
    from mathneuro.statistics.passes import masked_square_sums, square_sum_kernel

    fused = square_sum_kernel("compiled")
    x = torch.randn(3, 7, 16, dtype=torch.bfloat16)
    mask = torch.tensor([[1] * 7, [1] * 5 + [0] * 2, [1] * 2 + [0] * 5])
    ref = torch.stack([(x[b, : int(mask[b].sum())].double() ** 2).sum(0) for b in range(3)])
    torch.testing.assert_close(masked_square_sums(x, mask).double(), ref, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(fused(x, mask).double(), ref, rtol=1e-6, atol=1e-6)
    with pytest.raises(ValueError, match="kernel"):
        square_sum_kernel("turbo")


def test_auto_kernel_compiles_only_real_sized_models_on_a_cpu():
    from mathneuro.statistics.passes import AUTO_COMPILE_MIN_WEIGHTS, masked_square_sums, square_sum_kernel

    big = AUTO_COMPILE_MIN_WEIGHTS
    assert square_sum_kernel("auto", big - 1, "cpu") is masked_square_sums  # compiling costs more than it saves
    assert square_sum_kernel("auto", big, "cpu") is not masked_square_sums
    assert square_sum_kernel("auto", big, "cuda:0") is masked_square_sums  # eager was faster on an H200
    assert square_sum_kernel("compiled", 10, "cuda") is not masked_square_sums  # asked for: always fused


def test_statistics_pass_records_no_autograd_graph():
    """The forward pass runs without gradients, whatever the caller's grad mode: no graph is kept per batch."""
    model, tok = tiny_model(ARCHITECTURES[0])
    seen = []
    handle = base_model(model).register_forward_hook(lambda *_: seen.append(torch.is_grad_enabled()))
    try:
        with torch.enable_grad():
            collect_statistics(model, tok, TEXTS, batch_size=2, progress=False)
    finally:
        handle.remove()
    assert seen and not any(seen)
