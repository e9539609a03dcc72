"""Every registered intervention edits exactly what it says and undoes bit for bit: noise and finetune
touch only the selected weights on every tiny architecture, mean_ablate puts each selected neuron's
task-set mean in its activation and nothing else, scale and prune give today's numbers."""

from __future__ import annotations

import pytest
import torch

from mathneuro.edit.interventions import InterventionContext, default_intervention_node, resolve_intervention
from mathneuro.edit.interventions.units import mlp_linears, weight_masks
from mathneuro.edit.undoable import apply_intervention
from mathneuro.methods import mathneuro_selection, random_neuron_selection
from mathneuro.methods.selection import Selection
from mathneuro.models.targets import find_mlp_activations, find_target_linears, mlp_widths, weight_parameters
from mathneuro.models.tiny import ARCHITECTURES, tiny_model
from mathneuro.statistics.passes import collect_statistics
from mathneuro.util.plugins import unused_settings

from .conftest import TEXTS


def bits(t: torch.Tensor) -> torch.Tensor:
    return t.detach().view({1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()])


def snapshot(model) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in model.named_parameters()}


def weight_selection(model, tok, top_k=0.1) -> Selection:
    weights = weight_parameters(find_target_linears(model))
    m = collect_statistics(model, tok, TEXTS[:4], progress=False)["linear_inputs"]
    f = collect_statistics(model, tok, TEXTS[4:], progress=False)["linear_inputs"]
    return mathneuro_selection(weights, m, [f], top_k)


def neuron_selection(model, count=3) -> Selection:
    return Selection(neurons={name: torch.arange(0, 2 * count, 2) for name in find_mlp_activations(model)})


def context(model, tok, selection, seed=0, texts=None) -> InterventionContext:
    return InterventionContext(model=model, tokenizer=tok, selection=selection, seed=seed,
                               task_texts=TEXTS * 2 if texts is None else texts,
                               task_name="texts", task_ids_hash="x", max_length=32, batch_size=4)


def apply(name: str, model, tok, selection, seed=0, texts=None, **settings):
    spec, cfg = resolve_intervention({"name": name, **settings})
    return spec(context(model, tok, selection, seed, texts), cfg)


def assert_only_masked_changed(model, before, masks, *, all_masked_changed=True):
    for name, p in model.named_parameters():
        mask = masks.get(name)
        if mask is None:
            assert torch.equal(bits(p), bits(before[name])), name
            continue
        assert torch.equal(bits(p[~mask]), bits(before[name][~mask])), name
        if all_masked_changed:
            assert (p[mask] != before[name][mask]).float().mean() > 0.5, name


FINETUNE = {"steps": 3, "lr": 1e-2, "batch_size": 2, "seq_length": 24}


@pytest.mark.parametrize("arch", ARCHITECTURES)
@pytest.mark.parametrize("name,settings", [("noise", {"relative_std": 0.5}), ("finetune", FINETUNE)])
def test_only_the_selected_weights_change_and_undo_is_bit_exact(arch, name, settings):
    model, tok = tiny_model(arch)
    selection = weight_selection(model, tok)
    before = snapshot(model)
    flags = {n: p.requires_grad for n, p in model.named_parameters()}
    with apply(name, model, tok, selection, **settings) as edit:
        assert_only_masked_changed(model, before, selection.masks)
        assert edit.record
    for n, p in model.named_parameters():
        assert torch.equal(bits(p), bits(before[n])), n
        assert p.grad is None and p.requires_grad == flags[n]
    assert all(not m._forward_hooks and not m._forward_pre_hooks for m in model.modules())


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_a_neuron_selection_trains_only_its_neurons_rows_and_column(arch):
    model, tok = tiny_model(arch)
    selection = neuron_selection(model)
    masks = weight_masks(model, selection)
    activation = next(iter(selection.neurons))
    out_name, out, inputs = mlp_linears(model, activation)
    assert inputs and int(masks[f"{out_name}.weight"].sum()) == 3 * out.out_features
    before = snapshot(model)
    with apply("finetune", model, tok, selection, **FINETUNE):
        assert_only_masked_changed(model, before, masks, all_masked_changed=False)
        changed = sum(int((p != before[n]).sum()) for n, p in model.named_parameters())
        assert changed > 0.5 * sum(int(m.sum()) for m in masks.values())
    assert all(torch.equal(bits(p), bits(before[n])) for n, p in model.named_parameters())


def test_finetune_records_its_losses_and_keeps_state_proportional_to_the_selection():
    model, tok = tiny_model("llama")
    selection = weight_selection(model, tok, 0.05)
    n = selection.num_selected()
    settings = {**FINETUNE, "steps": 6, "lr": 3e-2}
    with apply("finetune", model, tok, selection, **settings) as edit:
        record = edit.record
        trained = snapshot(model)
    assert len(record["losses"]) == 6
    with apply("finetune", model, tok, selection, texts=[TEXTS[0]], **settings) as one_text:  # it learns
        assert one_text.record["losses"][-1] < one_text.record["losses"][0] - 0.05
    assert record["num_weights"] == n and record["optimizer_state_bytes"] == 8 * n  # AdamW: two fp32 moments
    assert record["data"]["source"] == "task_samples" and record["seed"] == 0
    # the same seed trains the same way, bit for bit; another seed draws other batches
    with apply("finetune", model, tok, selection, **settings) as again:
        assert again.record["losses"] == record["losses"]
        assert all(torch.equal(p, trained[k]) for k, p in model.named_parameters())
    with apply("finetune", model, tok, selection, seed=1, **settings) as other:
        assert other.record["losses"] != record["losses"]


def test_noise_is_seeded_and_scaled_by_each_matrix_std():
    model, tok = tiny_model("qwen2")
    selection = weight_selection(model, tok, 0.5)
    before = snapshot(model)
    with apply("noise", model, tok, selection, relative_std=0.2):
        first = snapshot(model)
    with apply("noise", model, tok, selection, relative_std=0.2):
        assert all(torch.equal(p, first[n]) for n, p in model.named_parameters())
    with apply("noise", model, tok, selection, seed=3, relative_std=0.2):
        assert any(not torch.equal(p, first[n]) for n, p in model.named_parameters())
    name, mask = next(iter(selection.masks.items()))
    added = (first[name] - before[name])[mask]
    ratio = float(added.std() / before[name].float().std())
    assert 0.15 < ratio < 0.25


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_mean_ablate_puts_each_selected_neurons_task_mean_in_its_activation_and_nothing_else(arch):
    model, tok = tiny_model(arch)
    selection = random_neuron_selection(mlp_widths(model), {n: 4 for n in mlp_widths(model)}, seed=0)
    activation = next(iter(selection.neurons))
    idx = selection.neurons[activation]
    out_name, out, _ = mlp_linears(model, activation)
    seen: dict[str, torch.Tensor] = {}
    spy = out.register_forward_pre_hook(lambda _m, args: seen.__setitem__("x", args[0].detach().clone()))
    # the means the intervention must use: every token of the task texts, the model unedited
    tokens = []
    with torch.no_grad():
        for text in TEXTS * 2:
            model(**tok(text, return_tensors="pt", truncation=True, max_length=32))
            tokens.append(seen["x"][0])
    expected = torch.cat(tokens).double().mean(0)[idx]
    enc = tok(TEXTS[2], return_tensors="pt")
    with torch.no_grad():
        model(**enc)
        plain = seen["x"]
        with apply("mean_ablate", model, tok, selection) as edit:
            after = {}
            late = out.register_forward_pre_hook(lambda _m, args: after.__setitem__("x", args[0].detach().clone()))
            model(**enc)
            late.remove()
    spy.remove()
    x = after["x"]
    torch.testing.assert_close(x[..., idx].double(), expected.expand(x.shape[:-1] + (idx.numel(),)),
                               rtol=1e-5, atol=1e-6)
    others = torch.ones(x.shape[-1], dtype=torch.bool)
    others[idx] = False
    assert torch.equal(x[..., others], plain[..., others])
    assert edit.record["num_neurons"] == selection.num_selected()
    assert all(not m._forward_pre_hooks for m in model.modules())


def test_mean_ablate_refuses_a_weight_level_selection_with_one_line():
    spec, _ = resolve_intervention({"name": "mean_ablate"})
    with pytest.raises(ValueError, match=r"^intervention.name: intervention 'mean_ablate' edits neurons "
                                         r"selections; method 'mathneuro' selects weights; a method that selects "
                                         r"neurons: method=lape, method=random_neurons$"):
        spec.check_unit("weights", "mathneuro")


@pytest.mark.parametrize("name,scalar", [("prune", 0.0), ("scale", 1.1), ("scale", 0.5)])
def test_scale_and_prune_give_todays_numbers(name, scalar):
    model, tok = tiny_model("gemma2")
    selection = weight_selection(model, tok)
    selection.neurons = {sorted(find_mlp_activations(model))[0]: torch.tensor([1, 4])}
    enc = tok(TEXTS[0], return_tensors="pt")
    with torch.no_grad(), apply_intervention(model, selection, scalar):
        today = model(**enc).logits, snapshot(model)
    with torch.no_grad(), apply(name, model, tok, selection, scalar=scalar) as edit:
        now = model(**enc).logits, snapshot(model)
    assert torch.equal(today[0], now[0]) and all(torch.equal(today[1][n], now[1][n]) for n in today[1])
    assert edit.record == {"scalar": scalar}


def test_bad_settings_are_refused_naming_the_key():
    for node, key in [({"name": "finetune", "steps": 0}, "intervention.steps"),
                      ({"name": "finetune", "optimizer": "lion"}, "intervention.optimizer"),
                      ({"name": "noise", "relative_std": -1.0}, "intervention.relative_std"),
                      ({"name": "prune", "scalar": 1.1}, "intervention.scalar"),
                      ({"name": "finetune", "steps": "x"}, "intervention.steps"),
                      ({"name": "scale", "bogus": 1}, "intervention.bogus"),
                      ({"name": "finetun"}, "intervention.name"),
                      ({"name": "finetune", "data": {"name": "g", "path": "/x/test.jsonl", "template": "{q}"}},
                       "intervention.data")]:
        with pytest.raises(ValueError, match=f"^{key}"):
            resolve_intervention(node)
    # a setting of another built-in intervention is ignored by resolution, and named when someone set it
    node = {**default_intervention_node(), "name": "scale", "scalar": 1.1, "steps": 5}
    spec, _ = resolve_intervention(node)
    schema = default_intervention_node()
    assert unused_settings(node, spec, "intervention", schema) == ["intervention.steps"]
    assert unused_settings({**node, "steps": 20}, spec, "intervention", schema, ["intervention.lr=1e-4"]) == [
        "intervention.lr"]
    # a top-level key of the same name (the point's seed) is no intervention setting
    assert unused_settings({**node, "steps": 20}, spec, "intervention", schema, ["seed=1", "+batch_size=2"]) == []


@pytest.mark.parametrize("name,settings", [("noise", {"relative_std": 0.5}), ("finetune", FINETUNE)])
def test_a_bfloat16_model_changes_only_the_selection_and_undoes_bit_for_bit(name, settings):
    model, tok = tiny_model("qwen2", dtype=torch.bfloat16)
    selection = weight_selection(model, tok)
    before = snapshot(model)
    with apply(name, model, tok, selection, **settings):
        assert_only_masked_changed(model, before, selection.masks, all_masked_changed=False)
        assert sum(int((p != before[n]).sum()) for n, p in model.named_parameters()) > 0
    assert all(torch.equal(bits(p), bits(before[n])) for n, p in model.named_parameters())


def test_finetune_trains_on_a_named_dataset_and_records_it(tmp_path):
    data = tmp_path / "train.jsonl"
    data.write_text("".join(f'{{"q": "{a} + {a} = {2 * a}"}}\n' for a in range(12)))
    model, tok = tiny_model("llama")
    selection = weight_selection(model, tok)
    node = {**FINETUNE, "data": {"name": "sums", "path": str(data), "template": "{q}"}}
    with apply("finetune", model, tok, selection, texts=[], **node) as edit:  # the task samples are not read
        record = edit.record
    assert record["data"]["source"] == "data" and record["data"]["name"] == "sums"
    assert record["data"]["num_texts"] == 12 and record["data"]["path"] == str(data) and record["data"]["texts_hash"]
