"""The W&B layout's pieces: the sweep's identity, run names and tags, the swept keys; one version everywhere."""

from __future__ import annotations

import json
import re
import threading
from pathlib import Path

import pytest

import mathneuro
from mathneuro.results.provenance import git_state, metric_direction
from mathneuro.results.wandb_layout import (
    IDENTITY_FILE,
    k_text,
    run_name,
    run_tags,
    sweep_identity,
    swept_values,
)

REPO = Path(__file__).resolve().parents[1]
POINT = {"model": "qwen", "task": "gsm8k", "filter": "race+mmlu", "method": "mathneuro", "top_k": 0.01,
         "intervention": "scale", "scalar": 1.1, "seed": 1, "num_samples": 500}


def test_the_group_is_the_experiment_with_the_sweeps_date_and_time_and_is_kept(tmp_path: Path) -> None:
    sweep = tmp_path / "multirun" / "2026-03-04" / "05-06-07"
    first = sweep_identity(sweep, "pruning_sweep")
    assert first["group"] == "pruning_sweep-2026-03-04_05-06-07"
    assert sweep_identity(sweep, "other")["group"] == first["group"]  # read back: the same on resume
    assert json.loads((sweep / IDENTITY_FILE).read_text())["report_run_id"] == first["report_run_id"]
    later = tmp_path / "multirun" / "2026-03-05" / "05-06-07"  # same clock time, another day: another group
    assert sweep_identity(later)["group"] == "sweep-2026-03-05_05-06-07"
    assert sweep_identity(tmp_path / "runs" / "x", multirun=False)["group"].startswith("run-")


def test_processes_racing_for_the_identity_agree(tmp_path: Path) -> None:
    seen = []
    threads = [threading.Thread(target=lambda: seen.append(sweep_identity(tmp_path / "s"))) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len({json.dumps(s, sort_keys=True) for s in seen}) == 1
    assert [p.name for p in (tmp_path / "s").iterdir()] == [IDENTITY_FILE]  # no temp file left


def test_names_are_short_and_carry_the_other_swept_keys() -> None:
    assert k_text(0.05) == "0.05" and k_text(0.001) == "0.001" and k_text(0.125) == "0.125"  # as top_k is written
    assert run_name(POINT) == "mathneuro K=0.01 s=1.1 seed=1"
    assert run_name({**POINT, "intervention": "prune", "scalar": 0.0}) == "mathneuro K=0.01 prune seed=1"
    assert run_name({**POINT, "method": "random", "reference": "wanda"}) == "random(wanda) K=0.01 s=1.1 seed=1"
    assert run_name(POINT, {"filter": "race", "num_samples": "100"}) == (
        "mathneuro K=0.01 s=1.1 seed=1 filter=race num_samples=100")
    long = run_name(POINT, {"model.name_or_path": "x" * 80})
    other = run_name(POINT, {"model.name_or_path": "x" * 79 + "y"})
    assert len(long) == 64 and long != other  # cut, and still apart
    assert run_name(POINT, template="{method}/{K}/{filter}") == "mathneuro/0.01/race+mmlu"
    assert run_name(POINT, template="{method}({reference})") == "mathneuro()"  # a field this point lacks: empty
    with pytest.raises(ValueError, match="logger.run_name"):
        run_name(POINT, template="{nope}")


def test_tags_name_every_field_a_comparison_filters_by() -> None:
    tags = run_tags(POINT, eval_name="paper", experiment="scaling_sweep", extra=["mine", "x" * 100])
    assert tags[:9] == ["method=mathneuro", "intervention=scale", "model=qwen", "task=gsm8k", "filter=race",
                        "filter=mmlu", "K=0.01", "scalar=1.1", "seed=1"]
    assert {"eval=paper", "experiment=scaling_sweep", "mine"} <= set(tags) and max(map(len, tags)) == 64


def test_swept_keys_come_from_the_sweeps_own_overrides(tmp_path: Path) -> None:
    (tmp_path / "multirun.yaml").write_text(
        "hydra:\n  overrides:\n"
        "    task: ['top_k=0.01,0.05', 'filter=race,mmlu', 'method=mathneuro,random', 'seed=0']\n")
    job = ["top_k=0.05", "filter=mmlu", "method=random", "seed=0"]
    assert swept_values(tmp_path, job) == {"filter": "mmlu"}  # method and K are in the name already; seed is fixed
    assert swept_values(tmp_path / "absent", job) == {}
    (tmp_path / "multirun.yaml").write_text(  # an experiment's sweep: the sweeper's params
        "hydra:\n  overrides:\n    task: ['experiment=ablation_grid']\n"
        "  sweeper:\n    params:\n      filter: race,mmlu\n      num_samples: 100\n      method: mathneuro,random\n")
    assert swept_values(tmp_path, ["experiment=ablation_grid", "filter=race", "num_samples=100", "method=random"]) == {
        "filter": "race"}


def test_metric_directions_follow_the_task_else_the_name() -> None:
    tasks = {"wikitext": {"higher_is_better": {"word_perplexity": False}},
             "odd": {"higher_is_better": {"score": False}}}
    assert metric_direction("math/gsm8k/exact_match,strict-match") == "up"
    assert metric_direction("nonmath/wikitext/word_perplexity", tasks) == "down"
    assert metric_direction("nonmath/odd/score", tasks) == "down"  # the task says so
    assert metric_direction("nonmath/odd/score_stderr", tasks) == "down"
    assert metric_direction("nonmath/ppl/bits_per_byte") == "down"


def test_one_version_in_the_package_pyproject_and_changelog() -> None:
    tomllib = pytest.importorskip("tomllib")  # Python >= 3.11
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert "version" not in project["project"] and "version" in project["project"]["dynamic"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "mathneuro.__version__"}
    headings = [line for line in (REPO / "CHANGELOG.md").read_text().splitlines() if line.startswith("## ")]
    released = [h for h in headings if h != "## Unreleased"]  # changes since the last release sit above it
    assert headings[: len(headings) - len(released)] in ([], ["## Unreleased"])
    assert re.search(r"\b(\d+\.\d+\.\d+)\b", released[0]).group(1) == mathneuro.__version__ == "0.2.0"


def test_git_state_of_this_checkout() -> None:
    state = git_state(str(REPO / "src" / "mathneuro"))
    if state is None:
        pytest.skip("not run from a git checkout")
    assert re.fullmatch(r"[0-9a-f]{40}", state["commit"]) and isinstance(state["dirty"], bool)
    assert git_state("/") is None  # not mathneuro's checkout
