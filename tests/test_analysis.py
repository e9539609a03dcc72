"""Exact numbers of the selection analyses on small hand-made selections."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch
from safetensors.torch import save_file

from mathneuro.methods.counts import (
    count_entries,
    count_selected,
    layer_index,
    module_type,
    per_layer_counts,
    per_module_counts,
    summarize,
)
from mathneuro.report import overlap as analysis
from mathneuro.report.overlap import data_efficiency, load_selection_file, overlap, overlap_matrix

Q0 = "model.layers.0.self_attn.q_proj.weight"
D1 = "model.layers.1.mlp.down_proj.weight"
U2 = "model.layers.2.mlp.up_proj.weight"
HEAD = "lm_head.weight"


def b(rows: list) -> torch.Tensor:
    return torch.tensor(rows, dtype=torch.bool)


@pytest.fixture
def sel_a() -> dict[str, torch.Tensor]:
    # |A| = 3 + 2 + 1 = 6; 6 + 4 + 2 = 12 mask entries
    return {Q0: b([[1, 0, 1], [0, 1, 0]]), D1: b([[1, 1], [0, 0]]), HEAD: b([[1, 0]])}


@pytest.fixture
def sel_b() -> dict[str, torch.Tensor]:
    # |B| = 3 + 2 + 2 = 7; A∩B = 2 (q_proj) + 1 (down_proj) = 3; lm_head only in A, up_proj only in B
    return {Q0: b([[1, 1, 0], [0, 1, 0]]), D1: b([[0, 1], [1, 0]]), U2: b([[1, 1]])}


# ------------------------------------------------------------------------------------------- names
@pytest.mark.parametrize(
    ("name", "index"),
    [
        ("model.layers.3.self_attn.q_proj.weight", 3),
        ("model.layers.12.mlp.fc1.weight", 12),
        ("transformer.h.11.attn.c_attn.weight", 11),
        ("blocks.5.ff.weight", 5),
        ("neurons::model.layers.7.mlp.act_fn", 7),
        ("model.layers.7.mlp.act_fn", 7),
        ("lm_head.weight", None),
        ("model.embed_tokens.weight", None),
        ("model.layers_extra.3.weight", None),
    ],
)
def test_layer_index(name: str, index: int | None) -> None:
    assert layer_index(name) == index


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("model.layers.3.self_attn.q_proj.weight", "q_proj"),
        ("model.layers.3.mlp.down_proj.weight", "down_proj"),
        ("model.layers.0.mlp.fc1.weight", "fc1"),
        ("model.layers.0.self_attn.dense.weight", "dense"),
        ("model.layers.0.self_attn.dense.bias", "dense"),
        ("neurons::model.layers.3.mlp.act_fn", "act_fn"),
        ("model.layers.3.mlp.act_fn", "act_fn"),
        ("lm_head.weight", "lm_head"),
    ],
)
def test_module_type(name: str, kind: str) -> None:
    assert module_type(name) == kind


@pytest.mark.parametrize("arch", ["llama", "phi"])
def test_names_of_real_tiny_models(arch: str) -> None:
    from mathneuro.models.tiny import tiny_model

    model, _ = tiny_model(arch)
    layers = {layer_index(n) for n, _ in model.named_parameters()}
    assert layers == {0, 1, None}
    for name, _ in model.named_parameters():
        if ".layers." in name:
            assert layer_index(name) in (0, 1)
        else:
            assert layer_index(name) is None
    kinds = {module_type(n) for n, p in model.named_parameters() if p.dim() == 2 and layer_index(n) is not None}
    expected = {"q_proj", "k_proj", "v_proj"} | ({"dense", "fc1", "fc2"} if arch == "phi" else
                                                {"o_proj", "gate_proj", "up_proj", "down_proj"})
    assert kinds == expected


# ---------------------------------------------------------------------------------------- counting
def test_counts(sel_a: dict) -> None:
    assert count_selected(sel_a) == 6
    assert count_entries(sel_a) == 12
    assert per_layer_counts(sel_a) == {"0": 3, "1": 2, "other": 1}
    assert list(per_layer_counts(sel_a)) == ["0", "1", "other"]
    assert per_module_counts(sel_a) == {"down_proj": 2, "lm_head": 1, "q_proj": 3}


def test_per_layer_keys_sorted_numerically_and_zero_blocks_kept() -> None:
    masks = {
        "model.layers.10.mlp.up_proj.weight": b([[1, 1, 1]]),
        "lm_head.weight": b([[1]]),
        "model.layers.2.mlp.up_proj.weight": b([[0, 0]]),
        "model.layers.2.self_attn.k_proj.weight": b([[1, 0]]),
        "model.layers.1.mlp.up_proj.weight": b([[0]]),
    }
    counts = per_layer_counts(masks)
    assert list(counts) == ["1", "2", "10", "other"]
    assert counts == {"1": 0, "2": 1, "10": 3, "other": 1}


def test_uint8_masks_count_like_bool(sel_a: dict) -> None:
    as_uint8 = {k: v.to(torch.uint8) for k, v in sel_a.items()}
    assert count_selected(as_uint8) == 6
    assert per_layer_counts(as_uint8) == per_layer_counts(sel_a)
    assert overlap(as_uint8, sel_a)["jaccard"] == 1.0


def test_neuron_counts_are_unique_indices() -> None:
    neurons = {"model.layers.0.mlp.act_fn": torch.tensor([1, 5, 7, 7]),
               "model.layers.3.mlp.act_fn": torch.tensor([2], dtype=torch.int64)}
    assert count_selected(neurons) == 4
    assert per_layer_counts(neurons) == {"0": 3, "3": 1}
    assert per_module_counts(neurons) == {"act_fn": 4}
    assert count_entries(neurons) == 0


def test_summarize_is_the_results_json_selection_object(sel_a: dict) -> None:
    summary = summarize(sel_a, num_scored=12, num_parameters=100, method="mathneuro", top_k=0.05)
    assert summary == {
        "method": "mathneuro",
        "top_k": 0.05,
        "num_selected": 6,
        "num_scored": 12,
        "num_parameters": 100,
        "fraction_of_model": 0.06,
        "fraction_of_scored": 0.5,
        "per_layer": {"0": 3, "1": 2, "other": 1},
        "per_module": {"down_proj": 2, "lm_head": 1, "q_proj": 3},
    }
    unknown = summarize(sel_a, num_scored=None, num_parameters=0)
    assert unknown["fraction_of_model"] is None and unknown["fraction_of_scored"] is None


def test_summarize_and_overlap_accept_selection_like_objects(sel_a: dict) -> None:
    neurons = {"model.layers.1.mlp.act_fn": torch.tensor([0, 4])}
    sel = SimpleNamespace(masks=sel_a, neurons=neurons, method="wanda", meta={"top_k": 0.1})
    summary = summarize(sel, num_scored=None, num_parameters=None)
    assert summary["method"] == "wanda" and summary["top_k"] == 0.1
    assert summary["num_selected"] == 8
    assert summary["per_layer"] == {"0": 3, "1": 4, "other": 1}
    assert summary["per_module"]["act_fn"] == 2
    assert count_selected(sel, kind="weights") == 6 and count_selected(sel, kind="neurons") == 2
    with pytest.raises(ValueError):
        count_selected(sel, kind="rows")
    # object with .neurons, raw mapping of int64 indices, and the on-disk "neurons::" naming agree
    on_disk = {f"neurons::{k}": v for k, v in neurons.items()}
    assert overlap(SimpleNamespace(masks={}, neurons=neurons), neurons)["jaccard"] == 1.0
    assert overlap(neurons, on_disk)["jaccard"] == 1.0
    with pytest.raises(TypeError):
        count_selected(object())


# ----------------------------------------------------------------------------------------- overlap
def test_overlap_of_known_masks(sel_a: dict, sel_b: dict) -> None:
    o = overlap(sel_a, sel_b)
    assert o == {
        "size_a": 6,
        "size_b": 7,
        "intersection": 3,
        "union": 10,
        "jaccard": 0.3,
        "a_in_b": 0.5,
        "b_in_a": 3 / 7,
    }
    rev = overlap(sel_b, sel_a)
    assert rev["a_in_b"] == o["b_in_a"] and rev["jaccard"] == o["jaccard"]


def test_overlap_per_layer(sel_a: dict, sel_b: dict) -> None:
    per = overlap(sel_a, sel_b, per_layer=True)["per_layer"]
    assert list(per) == ["0", "1", "2", "other"]
    assert (per["0"]["size_a"], per["0"]["size_b"], per["0"]["intersection"], per["0"]["jaccard"]) == (3, 3, 2, 0.5)
    assert per["1"]["jaccard"] == pytest.approx(1 / 3) and per["1"]["intersection"] == 1
    assert (per["2"]["size_a"], per["2"]["size_b"], per["2"]["jaccard"], per["2"]["a_in_b"]) == (0, 2, 0.0, None)
    assert (per["other"]["size_a"], per["other"]["b_in_a"]) == (1, None)


def test_overlap_of_neurons() -> None:
    a = {"model.layers.0.mlp.act_fn": torch.tensor([1, 5, 7]), "model.layers.1.mlp.act_fn": torch.tensor([2])}
    c = {"model.layers.0.mlp.act_fn": torch.tensor([5, 7, 9, 9])}
    o = overlap(a, c)
    assert (o["size_a"], o["size_b"], o["intersection"], o["union"]) == (4, 3, 2, 5)
    assert o["jaccard"] == 0.4 and o["a_in_b"] == 0.5 and o["b_in_a"] == pytest.approx(2 / 3)


def test_overlap_edge_cases(sel_a: dict) -> None:
    assert overlap({}, {}) == {"size_a": 0, "size_b": 0, "intersection": 0, "union": 0,
                               "jaccard": None, "a_in_b": None, "b_in_a": None}
    assert overlap(sel_a, sel_a)["jaccard"] == 1.0
    empty_a = {k: torch.zeros_like(v) for k, v in sel_a.items()}
    assert overlap(empty_a, sel_a)["jaccard"] == 0.0
    with pytest.raises(ValueError, match="shape"):
        overlap({Q0: b([[1, 0]])}, {Q0: b([[1], [0]])})
    with pytest.raises(ValueError, match="neuron"):
        overlap({"neurons::x": torch.tensor([1])}, SimpleNamespace(masks={"neurons::x": b([1])}, neurons=None))


def test_overlap_matrix(sel_a: dict, sel_b: dict) -> None:
    c = {Q0: b([[1, 0, 1], [0, 0, 0]])}  # |C| = 2, C ⊂ A, C∩B = 1
    m = overlap_matrix({"a": sel_a, "b": sel_b, "c": c})
    assert m["labels"] == ["a", "b", "c"]
    assert m["sizes"] == {"a": 6, "b": 7, "c": 2}
    assert m["intersection"] == [[6, 3, 2], [3, 7, 1], [2, 1, 2]]
    assert m["jaccard"][0] == [1.0, 0.3, 2 / 6]
    assert m["jaccard"][1][2] == m["jaccard"][2][1] == 1 / 8
    assert m["a_in_b"][2][0] == 1.0  # all of C inside A
    assert m["a_in_b"][0][2] == 2 / 6
    assert [(p["a"], p["b"]) for p in m["pairs"]] == [("a", "b"), ("a", "c"), ("b", "c")]


def test_data_efficiency_numbers() -> None:
    name = "model.layers.0.mlp.up_proj.weight"

    def s(*idx: int) -> dict[str, torch.Tensor]:
        mask = torch.zeros(1, 10, dtype=torch.bool)
        mask[0, list(idx)] = True
        return {name: mask}

    sels = {(10, 0): s(0, 1, 2, 3), (10, 1): s(0, 1, 2, 4), (1, 0): s(0, 1), (1, 1): s(2, 5)}
    rows = data_efficiency(sels)
    assert [r["num_samples"] for r in rows] == [1, 10]
    one, ten = rows
    assert (one["seeds"], one["pairs"], one["jaccard_mean"], one["jaccard_std"],
            one["a_in_b_mean"]) == (2, 1, 0.0, 0.0, 0.0)
    assert one["ref_num_samples"] == 10
    assert one["ref_in_n_mean"] == pytest.approx(0.375)  # (2/4 + 2/4 + 1/4 + 1/4) / 4
    assert one["n_in_ref_mean"] == pytest.approx(0.75)  # (1 + 1 + 1/2 + 1/2) / 4
    assert one["ref_jaccard_mean"] == pytest.approx(0.35)  # (1/2 + 1/2 + 1/5 + 1/5) / 4
    assert ten["jaccard_mean"] == pytest.approx(0.6) and ten["jaccard_std"] == 0.0
    assert ten["a_in_b_mean"] == pytest.approx(0.75)
    assert ten["ref_in_n_mean"] == pytest.approx(0.75) and ten["ref_jaccard_mean"] == pytest.approx(0.6)
    # three seeds at one N: sample std over the three pairs
    sels3 = {(5, 0): s(0, 1), (5, 1): s(0, 1), (5, 2): s(0, 2)}  # Jaccards 1, 1/3, 1/3
    row = data_efficiency(sels3)[0]
    assert row["pairs"] == 3 and row["jaccard_mean"] == pytest.approx(5 / 9)
    assert row["jaccard_std"] == pytest.approx(math.sqrt(((4 / 9) ** 2 + 2 * (2 / 9) ** 2) / 2))
    with pytest.raises(ValueError):
        data_efficiency(sels, reference_samples=500)


# ------------------------------------------------------------------------------------- saved files
def test_selection_file_roundtrip(tmp_path, sel_a: dict) -> None:
    tensors = {Q0: sel_a[Q0].to(torch.uint8), D1: sel_a[D1], HEAD: sel_a[HEAD],
               "neurons::model.layers.1.mlp.act_fn": torch.tensor([3, 4], dtype=torch.int64)}
    path = tmp_path / "selection.safetensors"
    save_file(tensors, str(path), metadata={"method": "mathneuro"})
    lazy = load_selection_file(path)
    assert isinstance(lazy, analysis.SelectionFile) and lazy.metadata == {"method": "mathneuro"}
    assert len(lazy) == 4
    assert count_selected(lazy) == 8
    assert per_layer_counts(lazy) == {"0": 3, "1": 4, "other": 1}
    eager = load_selection_file(path, lazy=False)
    assert overlap(lazy, eager)["jaccard"] == 1.0
    assert overlap(lazy, sel_a)["a_in_b"] == 6 / 8
    with pytest.raises(FileNotFoundError):
        load_selection_file(tmp_path / "nope.safetensors")


def test_saved_masks_are_packed_bits_and_read_back_exactly(tmp_path) -> None:
    from mathneuro.methods.selection import Selection

    gen = torch.Generator().manual_seed(0)
    masks = {"a.weight": torch.rand(37, 53, generator=gen) < 0.15,  # 1,961 entries: not a multiple of 8
             "b.weight": torch.rand(64, 128, generator=gen) < 0.5, "c.bias": torch.ones(3, dtype=torch.bool)}
    sel = Selection(masks, {"m.act_fn": torch.tensor([1, 7])}, "mathneuro", {"top_k": 0.15})
    path = tmp_path / "selection.safetensors"
    sel.save(path)
    entries = sum(m.numel() for m in masks.values())
    assert path.stat().st_size < entries / 8 + 2_000  # a bit per weight (+ header), not a byte
    back = Selection.load(path)
    assert back.meta == {"top_k": 0.15} and back.neurons["m.act_fn"].tolist() == [1, 7]
    for name, mask in masks.items():
        assert back.masks[name].shape == mask.shape and torch.equal(back.masks[name], mask)
    lazy = load_selection_file(path)
    assert lazy["a.weight"].dtype == torch.uint8 and torch.equal(lazy["a.weight"].bool(), masks["a.weight"])
    assert "packed_mask_shapes" not in lazy.metadata and lazy.metadata["method"] == "mathneuro"
    assert count_selected(lazy) == sum(int(m.sum()) for m in masks.values()) + 2
    eager = load_selection_file(path, lazy=False)
    assert overlap(lazy, eager)["jaccard"] == 1.0 and overlap(eager, sel)["jaccard"] == 1.0

    # a file written before packing (whole uint8 masks, no shapes in the metadata) still reads
    old = tmp_path / "old.safetensors"
    save_file({name: m.to(torch.uint8) for name, m in masks.items()}, str(old), metadata={"method": "wanda"})
    assert all(torch.equal(Selection.load(old).masks[n], m) for n, m in masks.items())
