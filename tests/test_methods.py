"""Selections equal straightforward reference computations, exactly."""

import math

import pytest
import torch

from mathneuro.methods import (
    lape_selection,
    mathneuro_selection,
    random_selection,
    topk_count,
    topk_mask,
    topk_mask_rows,
    wanda_selection,
)
from mathneuro.statistics import Statistics, collect_statistics
from mathneuro.targets import find_target_linears, weight_parameters
from mathneuro.tiny import tiny_model

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


def _lape(positive_by_task, tokens):
    return [Statistics("lape", {f"layer{i}::positive": torch.tensor(p[i]) for i in range(len(p))}, 1, t)
            for p, t in zip(positive_by_task, tokens, strict=True)]


def test_lape_on_a_hand_built_activation_pattern():
    # 2 layers x 10 neurons, 2 tasks (math, filter), 100 tokens each.
    math_pos = [[90, 5, 50, 50, 0, 0, 1, 2, 3, 4], [0, 95, 1, 1, 1, 1, 1, 1, 1, 1]]
    filt_pos = [[5, 90, 50, 50, 0, 0, 1, 2, 3, 4], [0, 0, 1, 1, 1, 1, 1, 1, 1, 1]]
    math_s, filt_s = _lape([math_pos, filt_pos], [100, 100])
    # p over all 40 values; the 95% quantile (38th smallest of 40) is 0.90 -> candidates: p > 0.90,
    # i.e. layer1 neuron1 (math 0.95) only. Its entropy is 0 (filter p = 0), so it is kept, and it
    # belongs to math (0.95 > bar 0.90).
    sel = lape_selection(math_s, [filt_s], top_k=1.0)
    assert sel.neurons["layer0"].tolist() == []
    assert sel.neurons["layer1"].tolist() == [1]
    assert sel.meta["num_candidates"] == 1
    # The 85% quantile (34th smallest) is 0.5, admitting the 0.90 neurons: layer0 n0 (math 0.9 / filter 0.05) and n1 (0.05 / 0.9).
    sel = lape_selection(math_s, [filt_s], top_k=1.0, filter_rate=0.85, activation_bar=0.85)
    assert sel.meta["num_candidates"] == 3
    assert sel.neurons["layer0"].tolist() == [0]  # n1 is kept too but belongs to the filter task
    assert sel.neurons["layer1"].tolist() == [1]
    # top_k keeps the lowest-entropy candidates: entropy(l1n1)=0 < entropy(l0n0) = entropy(l0n1)
    sel = lape_selection(math_s, [filt_s], top_k=0.34, filter_rate=0.85, activation_bar=0.85)
    assert sel.meta["num_kept"] == 1
    assert sel.neurons["layer0"].tolist() == [] and sel.neurons["layer1"].tolist() == [1]


@pytest.mark.parametrize("bad", [0, -0.1, 1.5, float("nan")])
def test_top_k_outside_unit_interval_is_refused(scored, bad):
    _, weights, math_stats, filt_stats = scored
    with pytest.raises(ValueError, match="top_k"):
        mathneuro_selection(weights, math_stats, [filt_stats], bad)
