"""Selections equal straightforward reference computations, exactly."""

import math

import pytest
import torch

from mathneuro.methods import (
    lape_keep_count,
    lape_min_top_k,
    lape_saturation_message,
    lape_saturation_top_k,
    lape_selection,
    mathneuro_selection,
    random_neuron_selection,
    random_selection,
    topk_count,
    topk_mask,
    topk_mask_rows,
    wanda_selection,
)
from mathneuro.models.targets import find_target_linears, weight_parameters
from mathneuro.models.tiny import tiny_model
from mathneuro.statistics.passes import Statistics, collect_statistics

from .conftest import TEXTS


def ref_topk(scores: torch.Tensor, k: int) -> set[int]:
    """k largest flat indices, ties to the lower index, by a full stable sort."""
    flat = scores.reshape(-1).tolist()
    order = sorted(range(len(flat)), key=lambda i: (-flat[i], i))
    return set(order[:k])


def as_set(mask: torch.Tensor) -> set[int]:
    return set(torch.nonzero(mask.reshape(-1)).squeeze(1).tolist())


def test_topk_mask_breaks_ties_by_lower_index():
    scores = torch.tensor([[1.0, 3.0, 3.0], [3.0, 0.5, 3.0]])
    assert as_set(topk_mask(scores, 2)) == {1, 2}
    assert as_set(topk_mask(scores, 3)) == {1, 2, 3}
    assert topk_mask(scores, 0).sum() == 0 and topk_mask(scores, 6).all()
    quantised = torch.randint(0, 4, (50, 40)).float()  # many ties, as on a 4-bit GGUF grid
    for k in (1, 7, 500, 1999):
        assert as_set(topk_mask(quantised, k)) == ref_topk(quantised, k)


def test_topk_mask_rows_per_row_count_and_ties():
    scores = torch.tensor([[2.0, 2.0, 1.0, 2.0], [0.0, 1.0, 5.0, 1.0]])
    mask = topk_mask_rows(scores, 2)
    assert mask.tolist() == [[True, True, False, False], [False, True, True, False]]


def test_topk_count_is_floor():
    assert topk_count(1000, 0.0015) == 1
    assert topk_count(1000, 0.05) == 50
    assert topk_count(7, 0.15) == 1


@pytest.fixture(scope="module")
def scored():
    model, tok = tiny_model("llama")
    targets = find_target_linears(model)
    math_stats = collect_statistics(model, tok, TEXTS[:4], progress=False)["linear_inputs"]
    filt_stats = collect_statistics(model, tok, TEXTS[4:], progress=False)["linear_inputs"]
    return model, weight_parameters(targets), math_stats, filt_stats


@pytest.mark.parametrize("top_k", [0.01, 0.1, 0.15, 0.5])
def test_mathneuro_is_the_per_matrix_set_difference(scored, top_k):
    _, weights, math_stats, filt_stats = scored
    sel = mathneuro_selection(weights, math_stats, [filt_stats], top_k)
    for name, w in weights.items():
        module = name[: -len(".weight")]
        k = math.floor(top_k * w.numel())
        s_math = w.abs() * math_stats.get(module, "norm")[None, :]
        s_filt = w.abs() * filt_stats.get(module, "norm")[None, :]
        expected = ref_topk(s_math, k) - ref_topk(s_filt, k)
        assert as_set(sel.masks[name]) == expected
        assert sel.masks[name].dtype == torch.bool and sel.masks[name].shape == w.shape


def test_mathneuro_separate_filter_k_and_union_of_filters(scored):
    _, weights, math_stats, filt_stats = scored
    small = mathneuro_selection(weights, math_stats, [filt_stats], 0.2, filter_top_k=0.05)
    large = mathneuro_selection(weights, math_stats, [filt_stats], 0.2, filter_top_k=0.4)
    both = mathneuro_selection(weights, math_stats, [filt_stats, math_stats], 0.2)
    for name in weights:
        assert as_set(large.masks[name]) <= as_set(small.masks[name])
        assert not both.masks[name].any()  # the math set itself as a filter removes everything


def test_selection_is_deterministic(scored):
    _, weights, math_stats, filt_stats = scored
    a = mathneuro_selection(weights, math_stats, [filt_stats], 0.1)
    b = mathneuro_selection(weights, math_stats, [filt_stats], 0.1)
    assert all(torch.equal(a.masks[n], b.masks[n]) for n in weights)


def test_wanda_per_matrix_is_math_topk_alone(scored):
    _, weights, math_stats, _ = scored
    sel = wanda_selection(weights, math_stats, 0.1)
    for name, w in weights.items():
        s = w.abs() * math_stats.get(name[:-7], "norm")[None, :]
        assert as_set(sel.masks[name]) == ref_topk(s, math.floor(0.1 * w.numel()))


def test_wanda_per_row_groups_by_output_row(scored):
    _, weights, math_stats, _ = scored
    sel = wanda_selection(weights, math_stats, 0.25, per_row=True)
    for name, w in weights.items():
        s = w.abs() * math_stats.get(name[:-7], "sq").sqrt()[None, :]
        k = math.floor(0.25 * w.shape[1])
        assert (sel.masks[name].sum(dim=1) == k).all()
        for row in range(w.shape[0]):
            assert as_set(sel.masks[name][row]) == ref_topk(s[row], k)


def test_random_matches_counts_per_matrix_and_is_seeded(scored):
    _, weights, math_stats, filt_stats = scored
    ref = mathneuro_selection(weights, math_stats, [filt_stats], 0.15)
    shapes = {n: w.shape for n, w in weights.items()}
    a = random_selection(shapes, ref.counts(), seed=3)
    b = random_selection(shapes, ref.counts(), seed=3)
    c = random_selection(shapes, ref.counts(), seed=4)
    assert a.counts() == ref.counts()
    assert all(torch.equal(a.masks[n], b.masks[n]) for n in shapes)
    assert any(not torch.equal(a.masks[n], c.masks[n]) for n in shapes)


def test_random_neurons_match_lape_counts_per_layer_and_are_seeded():
    math, filt = _lape([MATH_POS, FILT_POS], [100, 100])
    lape = lape_selection(math, [filt], 0.5)
    widths = {m: math.get(m, "positive").numel() for m in math.modules()}
    a = random_neuron_selection(widths, lape.counts(), seed=3)
    b = random_neuron_selection(widths, lape.counts(), seed=3)
    assert a.counts() == {m: lape.counts().get(m, 0) for m in widths} and sum(a.counts().values()) > 0
    for m, idx in a.neurons.items():
        assert len(set(idx.tolist())) == idx.numel() and (0 <= idx).all() and (idx < widths[m]).all()
        assert torch.equal(idx, b.neurons[m])
    m = next(m for m, n in lape.counts().items() if 0 < n < widths[m])
    draws = {tuple(random_neuron_selection(widths, lape.counts(), seed=s).neurons[m].tolist()) for s in range(20)}
    assert len(draws) > 1  # the seed moves the draw
    with pytest.raises(ValueError, match="outside"):
        random_neuron_selection(widths, {"layer0": 11}, seed=0)
    with pytest.raises(ValueError, match="without a width"):
        random_neuron_selection(widths, {"layer9": 1}, seed=0)


def _lape(positive_by_task, tokens):
    return [Statistics("lape", {f"layer{i}::positive": torch.tensor(p[i]) for i in range(len(p))}, 1, t)
            for p, t in zip(positive_by_task, tokens, strict=True)]


# 2 layers x 10 neurons (20 MLP neurons), 2 tasks (math, filter), 100 tokens each.
MATH_POS = [[90, 5, 50, 50, 0, 0, 1, 2, 3, 4], [0, 95, 1, 1, 1, 1, 1, 1, 1, 1]]
FILT_POS = [[5, 90, 50, 50, 0, 0, 1, 2, 3, 4], [0, 0, 1, 1, 1, 1, 1, 1, 1, 1]]


def test_lape_candidates_and_activation_bar_on_a_hand_built_activation_pattern():
    math_s, filt_s = _lape([MATH_POS, FILT_POS], [100, 100])
    # p over all 40 values; the 95% quantile (38th smallest of 40) is 0.90 -> candidates: p > 0.90,
    # i.e. layer1 neuron1 (math 0.95) only. Its entropy is 0 (filter p = 0), so it is kept, and it
    # belongs to math (0.95 > bar 0.90).
    sel = lape_selection(math_s, [filt_s], top_k=1.0)
    assert sel.neurons["layer0"].tolist() == []
    assert sel.neurons["layer1"].tolist() == [1]
    assert sel.meta["num_candidates"] == 1
    # The 85% quantile (34th smallest) is 0.5, admitting the 0.90 neurons: layer0 n0 (math 0.9 / filter 0.05) and n1
    # (0.05 / 0.9).
    sel = lape_selection(math_s, [filt_s], top_k=1.0, filter_rate=0.85, activation_bar=0.85)
    assert sel.meta["num_candidates"] == 3
    assert sel.neurons["layer0"].tolist() == [0]  # n1 is kept too but belongs to the filter task
    assert sel.neurons["layer1"].tolist() == [1]


def _math_neurons(sel):
    return [(m, i) for m in sorted(sel.neurons) for i in sel.neurons[m].tolist()]


# filter_rate = activation_bar = 0.85: 3 candidates of 20 neurons (share 0.15). Entropy: l1n1 = 0 (only
# math fires), l0n0 = l0n1 (mirror images; the tie goes to the lower index, l0n0), the rest +inf.
# Rule "all" keeps round(K * 20) lowest-entropy neurons (+inf ones drop out at the bar);
# rule "candidates" keeps floor(K * 3).
@pytest.mark.parametrize(
    ("share", "top_k", "kept", "math", "saturated"),
    [
        ("all", 0.02, 0, [], False),  # round(0.4) = 0
        ("all", 0.025, 0, [], False),  # round(0.5) = 0: half to even, as Python's round in the original
        ("all", 0.05, 1, [("layer1", 1)], False),  # below the candidates' share: l1n1 only
        ("all", 0.1, 2, [("layer0", 0), ("layer1", 1)], False),  # l0n0 wins the tie with l0n1 (filter's)
        ("all", 0.125, 2, [("layer0", 0), ("layer1", 1)], False),  # round(2.5) = 2
        ("all", 0.15, 3, [("layer0", 0), ("layer1", 1)], True),  # at the share: every candidate
        ("all", 0.5, 10, [("layer0", 0), ("layer1", 1)], True),  # above: 7 +inf neurons kept, none assigned
        ("all", 1.0, 20, [("layer0", 0), ("layer1", 1)], True),
        ("candidates", 0.05, 0, [], False),  # floor(0.15) = 0
        ("candidates", 0.15, 0, [], False),  # floor(0.45) = 0
        ("candidates", 0.34, 1, [("layer1", 1)], False),
        ("candidates", 0.5, 1, [("layer1", 1)], False),
        ("candidates", 0.67, 2, [("layer0", 0), ("layer1", 1)], False),
        ("candidates", 1.0, 3, [("layer0", 0), ("layer1", 1)], True),
    ],
)
def test_lape_top_k_rule_on_a_hand_built_activation_pattern(share, top_k, kept, math, saturated):
    math_s, filt_s = _lape([MATH_POS, FILT_POS], [100, 100])
    sel = lape_selection(math_s, [filt_s], top_k=top_k, filter_rate=0.85, activation_bar=0.85, share=share)
    assert sel.meta["num_kept"] == kept
    assert sel.meta["num_neurons"] == 20 and sel.meta["num_candidates"] == 3
    assert _math_neurons(sel) == math
    assert sel.meta["share"] == share
    assert sel.meta["saturated"] is saturated
    # "all": from the smallest K with round(K * 20) >= 3, just above 0.125 (round(2.5) = 2)
    assert sel.meta["saturation_top_k"] == pytest.approx(0.125 if share == "all" else 1.0, abs=1e-9)
    message = lape_saturation_message(sel.meta)
    assert (message is not None) == saturated
    if saturated:
        assert "3 candidate neurons" in message and "selects nothing new" in message


def test_lape_original_rule_equals_the_identify_py_formula_on_random_statistics():
    """A reference written from RUCAIBox identify.py: entropy over the normalised probabilities,
    +inf for non-candidates, topk(round(len * top_rate), largest=False), then the activation bar."""
    gen = torch.Generator().manual_seed(0)
    layers, width, tokens = 3, 40, [500, 300]
    positive = [torch.randint(0, t + 1, (layers, width), generator=gen) for t in tokens]
    stats = _lape([[p[i].tolist() for i in range(layers)] for p in positive], tokens)
    probs = torch.stack([p.to(torch.float64) / t for p, t in zip(positive, tokens, strict=True)], dim=-1)
    normed = probs / probs.sum(-1, keepdim=True)
    normed[torch.isnan(normed)] = 0
    entropy = -(normed * torch.where(normed > 0, normed.log(), 0)).sum(-1)
    flat = probs.flatten()
    top = flat.kthvalue(round(len(flat) * 0.95)).values.item()
    entropy[(probs > top).sum(-1) == 0] = torch.inf
    for top_rate in (0.001, 0.01, 0.03, 0.05, 0.1, 0.5):
        _, index = entropy.flatten().topk(round(entropy.numel() * top_rate), largest=False)
        selected = probs.reshape(-1, 2)[index]
        chosen = index[selected[:, 0] > top]
        expected = sorted((f"layer{int(i) // width}", int(i) % width) for i in chosen)
        sel = lape_selection(stats[0], stats[1:], top_k=top_rate)
        assert _math_neurons(sel) == expected, top_rate
        assert sel.meta["num_kept"] == round(layers * width * top_rate)


def test_lape_keep_count_and_smallest_useful_top_k():
    assert lape_keep_count(0.05, 116736, 7000) == 5837  # round(5836.8)
    assert lape_keep_count(0.05, 116736, 7000, share="candidates") == 350
    with pytest.raises(ValueError, match=r"method\.share: unknown value 'some'; allowed: all, candidates"):
        lape_keep_count(0.05, 100, 10, share="some")
    for n in (1, 2, 3, 20, 1000, 46080, 116736):
        k = lape_min_top_k(n)
        assert lape_keep_count(k, n, 0) == 1
        assert lape_keep_count(math.nextafter(k, 0), n, 0) == 0  # nothing smaller keeps a neuron
    sat = lape_saturation_top_k(116736, 7000)
    assert lape_keep_count(sat, 116736, 7000) >= 7000 > lape_keep_count(math.nextafter(sat, 0), 116736, 7000)
    assert lape_saturation_top_k(100, 0) is None


@pytest.mark.parametrize("bad", [0, -0.1, 1.5, float("nan")])
def test_top_k_outside_unit_interval_is_refused(scored, bad):
    _, weights, math_stats, filt_stats = scored
    with pytest.raises(ValueError, match="top_k"):
        mathneuro_selection(weights, math_stats, [filt_stats], bad)
