"""A researcher's own intervention, written outside the package, runs like a built-in one: named by import
path, its settings typed, its facts and record in ``results.json``, paired with its random reference.

The user's module permutes the selected values within each matrix (docs/extending.md's example). A
multirun of MathNeuro and random under it pairs the two in ``report/paired.csv``; a neuron-level
method under it is refused with one line (the intervention declared ``units=("weights",)``).
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

USER_MODULE = textwrap.dedent('''
    """My lab's interventions."""
    from dataclasses import dataclass

    import torch

    from mathneuro.edit.interventions import Intervention, InterventionConfig, register_intervention


    @dataclass
    class ShuffleConfig(InterventionConfig):
        name: str = "shuffle"
        seed: int = 0


    @register_intervention("shuffle", config=ShuffleConfig, units=("weights",), point_fields=("seed",))
    @torch.no_grad()
    def shuffle(ctx, cfg):
        """Permute the selected values within each matrix: the same values, in other places."""
        params = dict(ctx.model.named_parameters(remove_duplicate=False))
        generator = torch.Generator().manual_seed(cfg.seed)
        edit = Intervention()
        for name, mask in sorted(ctx.selection.masks.items()):
            index = mask.reshape(-1).nonzero().squeeze(1).to(params[name].device)
            flat, original = edit.save(params[name], index)  # the originals, for the undo
            order = torch.randperm(index.numel(), generator=generator).to(index.device)
            flat.index_copy_(0, index, original[order])
        edit.record = {"matrices": len(ctx.selection.masks), "seed": cfg.seed}
        return edit
''')


def run_cli(args: list[str], lab: Path, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(lab), os.environ.get("PYTHONPATH", "")]),
           "WANDB_MODE": "offline", "HYDRA_FULL_ERROR": "0"}
    return subprocess.run([sys.executable, "-m", "mathneuro", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=600, env=env)


@pytest.mark.e2e
def test_a_users_intervention_runs_with_its_random_reference_and_the_report_pairs_them(tiny_dir, tmp_path):
    lab = tmp_path / "lab"
    lab.mkdir()
    (lab / "my_interventions.py").write_text(USER_MODULE)
    base = [f"model.name_or_path={tiny_dir}", "model.name=tiny", "model.dtype=float32", "model.device=cpu",
            f"cache_dir={tmp_path / 'cache'}", "num_samples=6", "batch_size=4", "max_length=48", "progress=false",
            "top_k=0.1", "logger=none", "intervention.name=my_interventions:shuffle", "intervention.seed=3"]
    sweep = tmp_path / "sweep"
    proc = run_cli(["-m", *base, "method=mathneuro,random", "seed=0,1", "eval=quick", "eval.limit=6",
                    "eval.log_samples=true", f"hydra.sweep.dir={sweep}"], lab, tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = {}
    for path in sweep.glob("*/results.json"):
        data = json.loads(path.read_text())
        results[(data["point"]["method"], data["point"]["seed"])] = data
    assert len(results) == 4
    # each point's folder names the user's intervention (Hydra escapes its ':')
    assert all("intervention.name=my_interventions:shuffle" in p.parent.name for p in sweep.glob("*/results.json"))
    for data in results.values():
        assert data["point"]["intervention"] == "shuffle"
        assert data["point"]["intervention_args"] == {"seed": 3} and data["point"]["scalar"] is None
        assert data["intervention"] == {"name": "shuffle", "matrices": 14, "seed": 3}
        assert data["intervention_facts"]["units"] == ["weights"]
        # the recorded config holds the intervention's own settings, no built-in's (scalar, steps, ...)
        assert data["config"]["intervention"] == {"name": "my_interventions:shuffle", "seed": 3}
    ours, theirs = results[("mathneuro", 0)], results[("random", 0)]
    assert ours["selection"]["per_layer"] == theirs["selection"]["per_layer"]
    # the edit changed the model: the edited metrics are not the baseline's everywhere
    assert any(ours["metrics"][k] != ours["baseline_metrics"][k] for k in ours["metrics"] if "ppl" in k)
    with open(sweep / "report" / "paired.csv") as handle:
        rows = list(csv.DictReader(handle))
    pairs = {(r["method"], r["reference"], r["intervention"]) for r in rows}
    assert ("mathneuro", "random", "shuffle") in pairs
    assert all(r["seeds"] == "2" for r in rows if r["reference"] == "random")

    # a neuron-level method cannot be shuffled this way: one line, before any model loads
    proc = run_cli([*base, "method=lape", "eval=none", f"hydra.run.dir={tmp_path / 'lape'}"], lab, tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1] == (
        "mathneuro: error: intervention.name: intervention 'shuffle' edits weights selections; "
        "method 'lape' selects neurons; a method that selects weights: method=mathneuro, method=wanda, "
        "method=wanda_row, method=random")
