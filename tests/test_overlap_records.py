"""Claim 5 rebuilt from committed per-matrix overlap records: the counts of two draws' selections per weight
matrix, each selection's hash, the tool that writes them from saved selections, and claims.py's verdict."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from claimslib.overlap_records import (
    matrix_counts,
    overlap_shares,
    selection_hash,
    write_overlap_record,
)
from claimslib.records import read_packed, read_study, read_tree, write_packed

from mathneuro.methods.selection import Selection
from mathneuro.report.overlap import data_efficiency, load_selection_file
from tests.conftest import load_experiment

claims = load_experiment("claims/claims")
POINT = {"model": claims.MODEL, "task": "gsm8k", "filter": "mmlu", "top_k": 0.15, "method": "mathneuro"}


def tiny(seed: int, keep: float) -> Selection:
    """Two 'weight matrices' and one neuron entry; ``keep`` of a shared core plus a draw's own entries."""
    g = torch.Generator().manual_seed(seed)
    core = torch.zeros(4, 6, dtype=torch.bool)
    core[:2] = True
    own = torch.rand(4, 6, generator=g) < 0.2
    return Selection({"l.0.w": core & (torch.rand(4, 6, generator=g) < keep) | own,
                      "l.1.w": torch.rand(3, 5, generator=g) < 0.3},
                     {"l.1.act": torch.tensor(sorted({seed % 3, 3, 5}))}, method="mathneuro")


def test_counts_per_matrix_and_a_hash_of_the_selection() -> None:
    a, b = tiny(0, 0.9), tiny(1, 0.9)
    rows = {r["matrix"]: r for r in matrix_counts(a, b)}
    assert set(rows) == {"l.0.w", "l.1.w", "neurons::l.1.act"}
    m = rows["l.0.w"]
    assert (m["size_a"], m["size_b"], m["intersection"]) == (int(a.masks["l.0.w"].sum()), int(b.masks["l.0.w"].sum()),
                                                             int((a.masks["l.0.w"] & b.masks["l.0.w"]).sum()))
    assert rows["neurons::l.1.act"]["intersection"] == len({0, 3, 5} & {1, 3, 5})
    same = Selection({k: v.float() for k, v in a.masks.items()}, dict(a.neurons))  # 0/1 floats: the same set
    assert selection_hash(same) == selection_hash(a) != selection_hash(b)
    flipped = Selection({**a.masks, "l.1.w": ~a.masks["l.1.w"]}, dict(a.neurons))
    assert selection_hash(flipped) != selection_hash(a)


def test_claim_5s_shares_from_records_equal_the_aggregated_tables(tmp_path: Path) -> None:
    keeps = {1: 0.3, 10: 0.7, 100: 0.95}
    sels = {(n, s): tiny(100 * n + s, keep) for n, keep in keeps.items() for s in range(3)}
    for n in keeps:
        for a, b in ((0, 1), (0, 2), (1, 2)):
            write_overlap_record(tmp_path / "data_efficiency", {**POINT, "num_samples": n}, "M",
                                 ({"seed": a}, sels[(n, a)]), ({"seed": b}, sels[(n, b)]))
    packs = read_study(tmp_path / "data_efficiency")
    shares = overlap_shares(packs, POINT)
    table = {r["num_samples"]: r for r in data_efficiency(sels)}
    for n in keeps:
        assert shares[(n, "M")]["share"] == pytest.approx(table[n]["a_in_b_mean"])
        assert shares[(n, "M")]["pairs"] == 3 and shares[(n, "M")]["draws"] == 3
    c5 = claims.claim5(read_tree(tmp_path))
    assert c5["source"] == "records" and c5["share"] == pytest.approx([table[n]["a_in_b_mean"] for n in keeps])
    text = claims.build(tmp_path, resamples=100)
    assert "rebuilt from the committed per-matrix overlap records" in text


def test_a_record_that_does_not_add_up_or_a_draw_with_two_selections_is_not_judged(tmp_path: Path) -> None:
    folder = tmp_path / "data_efficiency"
    path = write_overlap_record(folder, {**POINT, "num_samples": 1}, "M", ({"seed": 0}, tiny(0, 0.5)),
                                ({"seed": 1}, tiny(1, 0.5)))
    packed = read_packed(path)
    write_packed(path, {**packed.header, "totals": {"size_a": 1, "size_b": 1, "intersection": 1}}, packed.rows)
    with pytest.raises(ValueError, match="not the sums of its per-matrix lines"):
        overlap_shares(read_study(folder), POINT)
    assert claims.claim5(read_tree(tmp_path))["status"].startswith("not judged: overlap record")
    write_overlap_record(folder, {**POINT, "num_samples": 1}, "M", ({"seed": 0}, tiny(0, 0.5)),
                         ({"seed": 1}, tiny(1, 0.5)))
    write_overlap_record(folder, {**POINT, "num_samples": 1}, "M", ({"seed": 0}, tiny(7, 0.5)),  # another draw 0
                         ({"seed": 2}, tiny(2, 0.5)))
    with pytest.raises(ValueError, match="draw 0 is counted with two different selections"):
        overlap_shares(read_study(folder), POINT)


def test_the_tool_writes_every_pair_of_saved_selections(tmp_path: Path) -> None:
    tool = load_experiment("claims/overlap_record")
    runs = []
    for seed in range(3):
        run = tmp_path / "runs" / f"n1_seed{seed}"
        run.mkdir(parents=True)
        tiny(seed, 0.5).save(run / "selection.safetensors")
        if seed < 2:
            Selection(tiny(seed + 10, 0.9).masks).save(run / "selection_topk.safetensors")
        point = {**POINT, "num_samples": 1, "seed": seed}
        (run / "results.json").write_text(json.dumps({"point": point, "hardware": {"device": "cpu"}}))
        runs.append(run)
    assert tool.main([*map(str, runs), "--out", str(tmp_path / "records")]) == 0
    packs = read_study(tmp_path / "records" / "data_efficiency")
    assert sorted(p.name for p in packs) == sorted(
        [f"overlap__M__mmlu__k0.15__n1__seed{a}-seed{b}" for a, b in ((0, 1), (0, 2), (1, 2))]
        + ["overlap__topk__mmlu__k0.15__n1__seed0-seed1"])
    one = next(p for p in packs if p.name.endswith("M__mmlu__k0.15__n1__seed0-seed1"))
    assert one.header["a"]["hash"] == selection_hash(load_selection_file(runs[0] / "selection.safetensors"))
    assert one.header["a"]["source"] == "n1_seed0" and one.header["totals"]["intersection"] == sum(
        r["intersection"] for r in one.rows)
