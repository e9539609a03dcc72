"""A finetune point through the runner: the model it leaves is the model it found, bit for bit; the loss of
every step is in ``results.json`` and in the W&B run as a curve; what was trained is recorded."""

from __future__ import annotations

import json

import pytest
import torch
from omegaconf import OmegaConf

from mathneuro.pipeline.runner import run_point
from mathneuro.pipeline.workbench import get_workbench

from .test_failures import wandb_records
from .test_runner import base_overrides, compose_cfg

pytestmark = pytest.mark.integration  # lm-eval probes, a W&B offline run


def test_a_finetune_point_records_its_losses_logs_a_curve_and_leaves_the_model_as_it_found_it(tiny_dir, tmp_path):
    overrides = [*base_overrides(tiny_dir, tmp_path / "cache"), "intervention=finetune", "intervention.steps=4",
                 "intervention.lr=1e-2", "intervention.seq_length=32", "eval=quick", "eval.limit=4",
                 "logger=wandb", "logger.mode=offline", "top_k=0.1"]
    cfg = OmegaConf.to_object(compose_cfg(overrides))
    bench = get_workbench(cfg)
    before = {n: p.detach().clone() for n, p in bench.model.named_parameters()}
    results = run_point(cfg, tmp_path / "out")
    assert all(torch.equal(p, before[n]) for n, p in bench.model.named_parameters())
    assert all(not p.requires_grad and p.grad is None for p in bench.model.parameters())

    record = results["intervention"]
    assert record["name"] == "finetune" and len(record["losses"]) == 4 and record["steps"] == 4
    assert record["num_weights"] == results["selection"]["num_selected"]
    assert sum(record["per_matrix"].values()) == record["num_weights"]
    assert record["optimizer_state_bytes"] == 8 * record["num_weights"]
    assert record["data"]["source"] == "task_samples"
    assert record["data"]["ids_hash"] == results["sample_ids_hash"]["task"]  # trained on the identification draw
    point = results["point"]
    assert point["intervention"] == "finetune" and point["scalar"] is None
    assert point["intervention_args"]["steps"] == 4 and point["intervention_args"]["lr"] == 0.01
    assert results["intervention_facts"]["units"] == ["weights", "neurons"]
    assert json.loads((tmp_path / "out" / "results.json").read_text())["intervention"]["losses"] == record["losses"]
    # the edit moved the model: the edited perplexity differs from the unedited one
    ppl = "nonmath/ppl/token_perplexity"
    assert results["metrics"][ppl] != results["baseline_metrics"][ppl]

    (run,) = (tmp_path / "out" / "wandb").glob("offline-run-*")
    curve = {}
    for rec in wandb_records(run):
        if rec.WhichOneof("record_type") == "history":
            items = {item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in rec.history.item}
            if "intervention/loss" in items:
                curve[items["intervention/step"]] = items["intervention/loss"]
    assert [curve[s] for s in sorted(curve)] == pytest.approx(record["losses"])
