"""Prune zeroes exactly the selected entries, scale multiplies exactly them, undo restores bit for bit."""

import pytest
import torch

from mathneuro.edit.undoable import apply_intervention
from mathneuro.methods import lape_selection, mathneuro_selection
from mathneuro.methods.selection import Selection
from mathneuro.models.targets import find_target_linears, mlp_widths, neuron_weight_counts, weight_parameters
from mathneuro.models.tiny import ARCHITECTURES, tiny_model
from mathneuro.statistics.passes import collect_statistics

from .conftest import TEXTS


def bits(t: torch.Tensor) -> torch.Tensor:
    """The raw bits of ``t``, so -0.0 and 0.0 (or two NaNs) compare as what they are."""
    return t.detach().view({1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()])


def snapshot(model):
    return {n: p.detach().clone() for n, p in model.named_parameters()}


def selection_for(model, tok, top_k=0.15):
    weights = weight_parameters(find_target_linears(model))
    m = collect_statistics(model, tok, TEXTS[:4], progress=False)["linear_inputs"]
    f = collect_statistics(model, tok, TEXTS[4:], progress=False)["linear_inputs"]
    return mathneuro_selection(weights, m, [f], top_k)


@pytest.mark.parametrize("arch", ARCHITECTURES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_prune_zeroes_exactly_the_selection_and_undo_is_bit_exact(arch, dtype):
    model, tok = tiny_model(arch, dtype=dtype)
    sel = selection_for(model, tok)
    before = snapshot(model)
    handle = apply_intervention(model, sel, 0.0)
    after = dict(model.named_parameters())
    for name, p in after.items():
        if name in sel.masks:
            mask = sel.masks[name]
            assert (p[mask] == 0).all()
            assert torch.equal(p[~mask], before[name][~mask])
        else:
            assert torch.equal(p, before[name])
    handle.undo()
    for name, p in model.named_parameters():
        assert torch.equal(bits(p), bits(before[name]))


def test_scale_multiplies_exactly_the_selection():
    model, tok = tiny_model("qwen2")
    sel = selection_for(model, tok, 0.1)
    before = snapshot(model)
    with apply_intervention(model, sel, 1.1):
        for name, p in model.named_parameters():
            mask = sel.masks.get(name, torch.zeros_like(p, dtype=torch.bool))
            assert torch.equal(p[mask], before[name][mask] * 1.1)
            assert torch.equal(p[~mask], before[name][~mask])
    assert all(torch.equal(p, before[n]) for n, p in model.named_parameters())


def test_one_model_serves_a_grid_of_edits():
    model, tok = tiny_model("llama")
    before = snapshot(model)
    for k in (0.01, 0.1):
        sel = selection_for(model, tok, k)
        for s in (0.0, 1.1, 0.5):
            apply_intervention(model, sel, s).undo()
    assert all(torch.equal(p, before[n]) for n, p in model.named_parameters())


def test_lape_scales_selected_neuron_activations_through_a_hook():
    model, tok = tiny_model("gemma2")
    stats = [collect_statistics(model, tok, t, kinds=("activation_counts",), progress=False)["activation_counts"]
             for t in (TEXTS[:4], TEXTS[4:])]
    sel = lape_selection(stats[0], stats[1:], top_k=1.0, filter_rate=0.5, activation_bar=0.5)
    assert sel.num_selected() > 0
    name, idx = next((n, i) for n, i in sel.neurons.items() if i.numel())
    act = dict(model.named_modules())[name]
    seen = {}
    probe = act.register_forward_hook(lambda _m, _a, o: seen.__setitem__("out", o.detach().clone()))
    enc = tok(TEXTS[0], return_tensors="pt")
    with torch.no_grad():
        model(**enc)
        plain = seen["out"]
        # the probe was registered first, so it sees the activation before the scaling hook;
        # the scaled output is read through a hook registered after it.
        with apply_intervention(model, sel, 0.0):
            after = {}
            h = act.register_forward_hook(lambda _m, _a, o: after.__setitem__("out", o.detach().clone()))
            model(**enc)
            h.remove()
    probe.remove()
    assert (after["out"][..., idx] == 0).all()
    others = torch.ones(plain.shape[-1], dtype=torch.bool)
    others[idx] = False
    torch.testing.assert_close(after["out"][..., others], plain[..., others])
    assert all(not m._forward_hooks for m in model.modules())


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_a_zeroed_neuron_is_its_output_column_zeroed_and_counts_as_those_weights(arch):
    """``num_weights_edited`` counts a neuron as one column of the MLP's output linear: zeroing the
    activation and zeroing that column give the same model."""
    model, tok = tiny_model(arch)
    widths, per_neuron = mlp_widths(model), neuron_weight_counts(model)
    name = sorted(widths)[0]
    mlp = name.rsplit(".", 1)[0]
    child, out = next((n, m) for n, m in model.get_submodule(mlp).named_children() if n in ("down_proj", "fc2"))
    assert widths[name] == out.in_features and per_neuron[name] == out.out_features == model.config.hidden_size
    idx = torch.tensor([0, 3, 5])
    enc = tok(TEXTS[0], return_tensors="pt")
    with torch.no_grad(), apply_intervention(model, Selection(neurons={name: idx}), 0.0):
        by_neuron = model(**enc).logits
    column = torch.zeros_like(out.weight, dtype=torch.bool)
    column[:, idx] = True
    with torch.no_grad(), apply_intervention(model, Selection({f"{mlp}.{child}.weight": column}), 0.0):
        by_column = model(**enc).logits
    assert int(column.sum()) == idx.numel() * per_neuron[name]
    torch.testing.assert_close(by_neuron, by_column)


def test_bad_scalar_and_mismatched_selection_are_refused():
    model, _ = tiny_model("llama")
    with pytest.raises(ValueError, match="intervention.scalar"):
        apply_intervention(model, Selection(), float("nan"))
    with pytest.raises(KeyError):
        apply_intervention(model, Selection({"nope.weight": torch.ones(2, dtype=torch.bool)}), 0.0)


def test_selection_roundtrip(tmp_path):
    model, tok = tiny_model("llama")
    sel = selection_for(model, tok)
    sel.neurons = {"model.layers.0.mlp.act_fn": torch.tensor([3, 5])}
    sel.save(tmp_path / "selection.safetensors")
    back = Selection.load(tmp_path / "selection.safetensors")
    assert back.method == "mathneuro" and back.meta["top_k"] == 0.15
    assert set(back.masks) == set(sel.masks)
    assert all(torch.equal(back.masks[n], sel.masks[n]) for n in sel.masks)
    assert back.neurons["model.layers.0.mlp.act_fn"].tolist() == [3, 5]
