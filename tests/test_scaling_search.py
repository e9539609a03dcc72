"""Issue 32's experiment tools without a real model: the scaling search's validation split, best point and trace,
and claim 4's denominators and per-block spread (experiments/claims/scaling_search.py, claim4_size.py)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from mathneuro.data import draw_samples
from mathneuro.methods.selection import Selection

from .conftest import load_experiment


def test_validation_questions_are_drawn_by_no_identification_draw() -> None:
    search = load_experiment("claims/scaling_search")
    kept, used = search.validation_indices(7473, [0, 1, 2, 3, 4], 100, 300, seed=32)
    drawn = {i for seed in range(5) for i in draw_samples(7473, 100, seed, bootstrap=True)}
    assert used == drawn and len(kept) == len(set(kept)) == 300
    assert not set(kept) & drawn
    assert kept == search.validation_indices(7473, [0, 1, 2, 3, 4], 100, 300, seed=32)[0]  # the same every time
    first, _ = search.validation_indices(7473, [0], 100, 200, seed=None)  # file order: the first free ones
    free = [i for i in range(7473) if i not in set(draw_samples(7473, 100, 0, bootstrap=True))]
    assert first == free[:200]
    with pytest.raises(ValueError, match="outside the identification draws"):
        search.validation_indices(10, [0], 100, 5, seed=0)


def _trial(folder: Path, num: int, top_k: float, scalar: float, objective: float | None, status="complete") -> None:
    folder.mkdir(parents=True)
    (folder / ".hydra").mkdir()
    (folder / ".hydra" / "hydra.yaml").write_text(f"hydra:\n  job:\n    num: {num}\n")
    (folder / "results.json").write_text(json.dumps({
        "status": status, "point": {"top_k": top_k, "scalar": scalar}, "objective": objective,
        "selection": {"num_selected": 10},
        "metrics": {"math/gsm8k_gen/exact_match,strict-match": 0.5 + (objective or 0)},
        "baseline_metrics": {"math/gsm8k_gen/exact_match,strict-match": 0.5}}))


def test_best_point_is_the_highest_objective_and_the_trace_keeps_the_run_order(tmp_path) -> None:
    search = load_experiment("claims/scaling_search")
    _trial(tmp_path / "c", 0, 0.05, 1.1, 0.02)
    _trial(tmp_path / "a", 1, 0.1, 1.3, 0.06)
    _trial(tmp_path / "b", 2, 0.02, 1.2, 0.06)  # ties with trial 1: the smaller K wins
    _trial(tmp_path / "d", 3, 0.2, 1.5, float("nan"))
    _trial(tmp_path / "e", 4, 0.3, 1.5, 0.9, status="running")  # not complete: not a trial
    rows = search.trials(tmp_path)
    assert [r["trial"] for r in rows] == [0, 1, 2, 3]
    assert (search.best(rows)["top_k"], search.best(rows)["scalar"]) == (0.02, 1.2)
    assert search.main(["best", str(tmp_path)]) == 0
    assert search.main(["best", str(tmp_path), "--expect", "5"]) == 2  # a trial still running: no best yet
    table = search.trace_markdown(rows)
    assert table.count("**best**") == 1 and "| 1 | 0.1 | 1.3 |" in table


def _tiny_gguf(path: Path, tied_twice: bool) -> int:
    from gguf import GGUFWriter

    rng = np.random.default_rng(0)
    emb = rng.standard_normal((64, 16)).astype(np.float32)  # 64 tokens x 16 dims
    writer = GGUFWriter(str(path), "qwen2")
    writer.add_tensor("token_embd.weight", emb)
    writer.add_tensor("blk.0.ffn_down.weight", rng.standard_normal((16, 32)).astype(np.float32))
    head = (emb + 0.01 * rng.standard_normal(emb.shape).astype(np.float32) if tied_twice
            else rng.standard_normal(emb.shape))
    writer.add_tensor("output.weight", head.astype(np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return emb.size


@pytest.mark.parametrize("tied_twice", [True, False])
def test_the_output_matrix_is_counted_once_only_when_it_is_the_embedding_stored_twice(tmp_path, tied_twice) -> None:
    claim4 = load_experiment("claims/claim4_size")
    size = _tiny_gguf(tmp_path / "m.gguf", tied_twice)
    facts = claim4.gguf_facts(tmp_path / "m.gguf")
    total = 2 * size + 16 * 32
    assert facts["loaded_parameters"] == total
    assert facts["output_stored_twice"] is tied_twice
    assert facts["upstream_parameters"] == (total - size if tied_twice else total)


def test_per_block_spread_is_read_from_the_saved_masks(tmp_path) -> None:
    claim4 = load_experiment("claims/claim4_size")
    masks = {f"model.layers.{i}.mlp.down_proj.weight": torch.zeros(4, 10, dtype=torch.bool) for i in range(3)}
    masks["model.layers.0.mlp.down_proj.weight"][0, :2] = True  # 2
    masks["model.layers.1.mlp.down_proj.weight"][:2, :3] = True  # 6
    masks["model.layers.2.mlp.down_proj.weight"][0, :4] = True  # 4
    (tmp_path / "p").mkdir()
    Selection(masks, {}, "mathneuro", {}).save(tmp_path / "p" / "selection.safetensors")
    (tmp_path / "p" / "results.json").write_text(json.dumps(
        {"point": {"seed": 0}, "selection": {"per_layer": {"0": 2, "1": 6, "2": 4}}}))
    spread = claim4.block_spread(claim4.selection_files([str(tmp_path)])[0])
    assert spread["num_selected"] == 12 and spread["num_scored"] == 120 and spread["blocks"] == 3
    assert spread["share_min"] == pytest.approx(2 / 12) and spread["share_max"] == pytest.approx(6 / 12)
    assert spread["max_over_min"] == pytest.approx(3.0) and spread["matches_results_json"] is True
