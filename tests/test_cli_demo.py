"""The command a newcomer meets first: ``mathneuro --help`` and ``experiment=demo`` (what ``make run`` runs)."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hydra.core.config_store import ConfigStore

from mathneuro.pipeline.config import GROUP_SCHEMAS, register_configs
from mathneuro.report.console import paired_text, points_text

ROOT = Path(__file__).resolve().parents[1]


def cli(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "WANDB_MODE": "offline", "HYDRA_FULL_ERROR": "0"}
    return subprocess.run([sys.executable, "-m", "mathneuro", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=300, env=env)


@pytest.mark.e2e
@pytest.mark.integration
def test_help_names_mathneuro_says_what_it_does_and_lists_only_real_options(tmp_path):
    res = cli(["--help"], tmp_path)
    assert res.returncode == 0, res.stderr[-2000:]
    out = res.stdout
    assert out.startswith("mathneuro: find the weights of a language model")
    assert "powered by Hydra" not in out and "cli is" not in out
    assert "_schema" not in out  # the structured configs are no options to pick
    groups = {line.split(":")[0]: line.split(": ", 1)[1].split(", ") for line in out.splitlines()
              if line.startswith(("model: ", "task: ", "filter: ", "method: ", "eval: ", "logger: ", "intervention: "))}
    assert groups["intervention"] == ["finetune", "mean_ablate", "noise", "prune", "scale"]
    assert groups["logger"] == ["none", "wandb"]
    for group in ("model", "task", "filter", "method", "eval"):
        assert groups[group] == sorted(p.stem for p in (ROOT / "conf" / group).glob("*.yaml")), group
    assert "top_k: 0.05" in out  # the composed config follows, with its defaults
    assert "docs/configuration.md" in out
    # the chosen intervention's settings only (the schema carries every built-in's; another's is refused)
    intervention = out[out.index("\nintervention:\n"):].split("\neval:", 1)[0].split()
    assert intervention == ["intervention:", "name:", "prune", "scalar:", "0.0"]
    res = cli(["--help", "intervention=noise", "method=lape"], tmp_path)
    intervention = res.stdout[res.stdout.index("\nintervention:\n"):].split("\neval:", 1)[0]
    assert "relative_std:" in intervention and "scalar:" not in intervention and "steps:" not in intervention
    method = res.stdout[res.stdout.index("\nmethod:\n"):].split("\nintervention:", 1)[0]
    assert "filter_rate:" in method and "filter_top_k:" not in method


@pytest.mark.e2e
@pytest.mark.integration
def test_cfg_job_of_a_multirun_says_in_one_line_what_to_do(tmp_path):
    res = cli(["-m", "top_k=0.01,0.05", "method=mathneuro,random", "--cfg", "job"], tmp_path)
    assert res.returncode == 2 and res.stdout == ""
    assert res.stderr.splitlines() == [
        "mathneuro: error: --cfg: shows the config of one job, not of a sweep (-m); drop -m and give one value "
        "of each swept key, e.g. top_k=0.01 method=mathneuro"]
    res = cli(["top_k=0.01", "method=mathneuro", "--cfg", "job"], tmp_path)  # as the line says: it works
    assert res.returncode == 0 and "top_k: 0.01" in res.stdout


def test_group_schemas_stay_registered_at_the_root_of_the_config_store():
    register_configs()
    store = ConfigStore.instance()
    for name in ("config_schema", *GROUP_SCHEMAS):
        assert store.load(f"{name}.yaml") is not None
    for group in ("model", "task", "filter", "eval", "logger", "intervention"):
        assert group not in store.repo  # nothing of ours inside a group: --help lists files only


def test_console_tables_show_each_point_beside_the_unedited_model_and_mark_resolved_intervals():
    rows = [{"method": "mathneuro", "seed": 0, "math/arith/exact_match": 0.0, "baseline/math/arith/exact_match": 0.7},
            {"method": "random", "seed": 0, "math/arith/exact_match": 0.24, "baseline/math/arith/exact_match": 0.7}]
    table = points_text(rows, ["math/arith/exact_match", "math/arith/exact_match_stderr"]).splitlines()
    assert table[0].split() == ["metric", "unedited", "mathneuro", "random"]
    assert table[1].split() == ["math/arith/exact_match", "0.700", "0.000", "0.240"] and len(table) == 2
    paired = [{"method": "mathneuro", "reference": "baseline", "task": "arith", "metric": "exact_match",
               "n_examples": 50, "diff": -0.7, "ci_low": -0.82, "ci_high": -0.58, "ci95_low": -0.84,
               "ci95_high": -0.55},
              {"method": "mathneuro", "reference": "random", "task": "mc", "metric": "acc",
               "n_examples": 40, "diff": 0.05, "ci_low": -0.075, "ci_high": 0.175, "ci95_low": -0.08,
               "ci95_high": 0.18}]
    lines = paired_text(paired).splitlines()
    assert lines[0].endswith("verdict")
    assert lines[1].startswith("mathneuro - unedited") and "-0.700 [-0.840, -0.550] *" in lines[1]
    assert lines[1].endswith(" lower")
    assert lines[2].startswith("mathneuro - random") and "+0.050 [-0.080, +0.180] " in lines[2]
    assert lines[2].endswith(" no difference shown")


@pytest.mark.e2e
@pytest.mark.integration
def test_demo_runs_mathneuro_and_random_and_prints_both_with_paired_intervals(tiny_dir, tmp_path):
    sweep = tmp_path / "sweep"
    res = cli(["experiment=demo", f"model.name_or_path={tiny_dir}", "model.name=tiny", "model.dtype=float32",
               "model.device=cpu", f"cache_dir={tmp_path / 'cache'}", "num_samples=6", "batch_size=4",
               "max_length=64", "progress=false", "logger=none", "eval.arith.num_problems=10",
               f"hydra.sweep.dir={sweep}"], tmp_path)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "Loading weights" not in res.stderr and "it/s]" not in res.stderr  # progress=false: no bars at all
    out = res.stdout
    methods = sorted(json.loads(p.read_text())["point"]["method"] for p in sweep.glob("*/results.json"))
    assert methods == ["mathneuro", "random"]
    scores = out[out.index("Scores (mean over seeds):"):].splitlines()
    assert scores[1].split() == ["metric", "unedited", "mathneuro", "random"]
    paired = out[out.index("Paired differences on the same examples"):]
    for comparison in ("mathneuro - unedited", "mathneuro - random", "random - unedited"):
        assert f"\n{comparison}" in paired
    with open(sweep / "report" / "paired.csv") as f:
        rows = list(csv.DictReader(f))
    vs_random = {(r["task"], r["metric"]): r for r in rows if r["method"] == "mathneuro" and r["reference"] == "random"}
    assert vs_random[("arith", "exact_match")]["n_examples"] == "10"
    assert vs_random[("mc", "acc")]["n_examples"] == "40"
