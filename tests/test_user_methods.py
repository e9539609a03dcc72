"""A researcher's own methods, written outside the package, are as first-class as the built-in ones.

One weight-level method (the largest |W| of every matrix) and one neuron-level method (the MLP
neurons that fire more often on the task set than on the filter set) live in the user's own
module and config folder. A multirun runs each with its size-matched random reference; the report
pairs them; their metadata reaches ``results.json``. Nothing in ``src/`` names them.
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
    """My lab's methods."""
    from dataclasses import dataclass

    import torch

    from mathneuro.methods import LinearMethodConfig, MethodConfig, Selection, register_method, topk_count, topk_mask


    @dataclass
    class LargestConfig(LinearMethodConfig):
        name: str = "largest"
        power: float = 1.0


    @register_method("largest", config=LargestConfig, topk_per_matrix=True)
    def largest(inputs, cfg):
        """The top-K of |W|^power in every scored matrix (no statistics used)."""
        masks = {name: topk_mask(w.detach().abs().float() ** cfg.power, topk_count(w.numel(), inputs.top_k))
                 for name, w in inputs.weights.items()}
        return Selection(masks, method="largest", meta={"power": cfg.power, "top_k": inputs.top_k})


    @dataclass
    class FiringGapConfig(MethodConfig):
        name: str = "firing_gap"
        min_gap: float = -1.0


    @register_method("firing_gap", needs=("activation_counts",), config=FiringGapConfig, unit="neurons")
    def firing_gap(inputs, cfg):
        """Per MLP layer, the top-K neurons by (firing rate on the task) - (firing rate on the filter)."""
        task, other = inputs.task["activation_counts"], inputs.filters[0]["activation_counts"]
        neurons, gaps = {}, []
        for module in task.modules():
            gap = (task.get(module, "positive").double() / max(task.num_tokens, 1)
                   - other.get(module, "positive").double() / max(other.num_tokens, 1))
            k = max(1, topk_count(gap.numel(), inputs.top_k))
            top = torch.topk(gap, k).indices
            keep = torch.sort(top[gap[top] > cfg.min_gap]).values
            neurons[module] = keep.to(torch.int64)
            gaps.append(float(gap[keep].mean()) if keep.numel() else 0.0)
        return Selection(neurons=neurons, method="firing_gap",
                         meta={"mean_gap": sum(gaps) / len(gaps), "layers": len(gaps)})
''')

USER_CONFIGS = {
    "largest.yaml": "name: my_methods:largest\npower: 2.0\n",
    "random_largest.yaml": "name: random\nreference: my_methods:largest\nreference_args: {power: 2.0}\n",
    "firing_gap.yaml": "name: my_methods:firing_gap\nmin_gap: -1.0\n",
    "random_firing_gap.yaml": "name: random_neurons\nreference: my_methods:firing_gap\n",
}


@pytest.fixture(scope="module")
def user_lab(tmp_path_factory) -> Path:
    """The user's package and config folder, outside the repository."""
    root = tmp_path_factory.mktemp("lab")
    (root / "my_methods.py").write_text(USER_MODULE)
    (root / "conf" / "method").mkdir(parents=True)
    for name, text in USER_CONFIGS.items():
        (root / "conf" / "method" / name).write_text(text)
    return root


def run_cli(args: list[str], lab: Path, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(lab), os.environ.get("PYTHONPATH", "")]),
           "WANDB_MODE": "offline", "HYDRA_FULL_ERROR": "0"}
    return subprocess.run([sys.executable, "-m", "mathneuro", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=600, env=env)


def tiny_args(tiny_dir: Path, tmp_path: Path, top_k: float = 0.1) -> list[str]:
    return [f"model.name_or_path={tiny_dir}", "model.name=tiny", "model.dtype=float32", "model.device=cpu",
            f"cache_dir={tmp_path / 'cache'}", "num_samples=6", "batch_size=4", "max_length=48", "progress=false",
            f"top_k={top_k}"]


@pytest.mark.e2e
def test_user_methods_run_with_their_own_size_random_references_and_the_report_pairs_them(user_lab, tiny_dir,
                                                                                           tmp_path):
    sweep = tmp_path / "sweep"
    proc = run_cli(["-m", f"--config-dir={user_lab / 'conf'}", *tiny_args(tiny_dir, tmp_path),
                    "method=largest,random_largest,firing_gap,random_firing_gap", "seed=0,1",
                    "eval=quick", "eval.limit=6", "eval.log_samples=true", f"hydra.sweep.dir={sweep}"],
                   user_lab, tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = {}
    for path in sweep.glob("*/results.json"):
        data = json.loads(path.read_text())
        results[(data["point"]["method"], data["point"].get("reference"), data["point"]["seed"])] = data
    assert len(results) == 8

    largest = results[("my_methods:largest", None, 0)]
    gap = results[("my_methods:firing_gap", None, 0)]
    rand = results[("random", "my_methods:largest", 0)]
    rand_neurons = results[("random_neurons", "my_methods:firing_gap", 0)]
    # each method's metadata and facts reach results.json
    assert largest["selection"]["meta"]["power"] == 2.0
    assert gap["selection"]["meta"]["layers"] > 0 and "mean_gap" in gap["selection"]["meta"]
    assert largest["method_facts"]["unit"] == "weights" and gap["method_facts"]["unit"] == "neurons"
    assert gap["method_facts"]["reference"] == "random_neurons"
    # the recorded config holds the chosen method's and intervention's settings, no other built-in's
    assert set(largest["config"]["method"]) == {"name", "power", "targets", "include_lm_head"}
    assert set(gap["config"]["method"]) == {"name", "min_gap"}
    assert largest["config"]["intervention"] == {"name": "prune", "scalar": 0.0}
    # the references are sized by the user's methods (with their settings), not by MathNeuro or LAPE
    assert rand["selection"]["per_layer"] == largest["selection"]["per_layer"]
    assert rand["selection"]["num_selected"] == largest["selection"]["num_selected"]
    assert rand_neurons["selection"]["per_layer"] == gap["selection"]["per_layer"]
    assert rand_neurons["selection"]["meta"]["reference"] == "my_methods:firing_gap"

    with open(sweep / "report" / "paired.csv") as handle:
        rows = list(csv.DictReader(handle))
    pairs = {(r["method"], r["reference"]) for r in rows}
    assert ("my_methods:largest", "random(my_methods:largest)") in pairs
    assert ("my_methods:firing_gap", "random_neurons(my_methods:firing_gap)") in pairs
    assert ("my_methods:largest", "random_neurons(my_methods:firing_gap)") not in pairs
    assert ("my_methods:firing_gap", "random(my_methods:largest)") not in pairs
    both_seeds = [r for r in rows if r["reference"] == "random(my_methods:largest)"]
    assert both_seeds and all(r["seeds"] == "2" for r in both_seeds)


@pytest.mark.e2e
def test_a_setting_no_method_of_the_run_has_is_refused_and_one_some_have_is_recorded_as_ignored(
        user_lab, tiny_dir, tmp_path):
    base = [*tiny_args(tiny_dir, tmp_path, top_k=0.5), "eval=none", "logger=none"]
    # no method of the sweep has `share`: refused before any job, one line naming the key
    proc = run_cli(["-m", *base, "method=mathneuro,wanda", "method.share=candidates",
                    f"hydra.sweep.dir={tmp_path / 'refused'}"], user_lab, tmp_path)
    assert proc.returncode == 2, proc.stderr[-3000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("mathneuro: error: method.share: not a setting of any method of this run (mathneuro, wanda)")
    assert not list((tmp_path / "refused").glob("*/results.json"))
    # a single run: the method lacks the setting, so no method of the run uses it
    proc = run_cli([*base, "method=mathneuro", "method.share=all", f"hydra.run.dir={tmp_path / 'single'}"],
                   user_lab, tmp_path)
    assert proc.returncode == 2 and "method.share: not a setting of method 'mathneuro'" in proc.stderr
    # lape has it: mathneuro's point records it as ignored, lape's point uses it
    sweep = tmp_path / "mixed"
    proc = run_cli(["-m", *base, "method=mathneuro,lape", "method.share=candidates", f"hydra.sweep.dir={sweep}"],
                   user_lab, tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    by_method = {json.loads(p.read_text())["point"]["method"]: json.loads(p.read_text())
                 for p in sweep.glob("*/results.json")}
    assert by_method["mathneuro"]["ignored_settings"] == ["method.share"]
    assert "ignored_settings" not in by_method["lape"] and by_method["lape"]["point"]["share"] == "candidates"
    assert "method.share does not apply to method mathneuro" in proc.stderr + proc.stdout


def test_an_intervention_setting_no_intervention_of_the_sweep_has_is_refused_before_any_point(
        user_lab, tiny_dir, tmp_path):
    base = [*tiny_args(tiny_dir, tmp_path, top_k=0.5), "eval=none", "logger=none"]
    sweep = tmp_path / "refused"
    proc = run_cli(["-m", *base, "method=mathneuro", "intervention=prune,scale", "intervention.steps=3",
                    f"hydra.sweep.dir={sweep}"], user_lab, tmp_path)
    assert proc.returncode == 2, proc.stderr[-3000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("mathneuro: error: intervention.steps: not a setting of any intervention of this run "
                           "(prune, scale)")
    assert not list(sweep.glob("*/results.json")) and not (tmp_path / "cache").exists()
