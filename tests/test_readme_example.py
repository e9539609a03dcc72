"""The README's Python example is public API users copy: it runs as written, on a tiny model and records
in place of the Hub model and the data files it names."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import mathneuro.data
import mathneuro.models
from mathneuro.models.tiny import tiny_model

README = Path(__file__).resolve().parents[1] / "README.md"


def readme_example() -> str:
    section = README.read_text().split("## From Python", 1)[1]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_the_readme_example_runs_prunes_inside_the_block_and_restores_after(monkeypatch):
    model, tok = tiny_model("llama")
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    records = {"gsm8k/train.jsonl": [{"question": f"What is {i} + {i}?", "answer": f"{i} + {i} = {2 * i}. #### {2 * i}"}
                                     for i in range(12)],
               "race/validation_high.jsonl": [{"article": f"Story {i}: the cat sat on mat {i}.", "question": "Where?"}
                                              for i in range(12)]}
    monkeypatch.setattr(mathneuro.models, "load_model", lambda name, **kw: (model, tok))
    monkeypatch.setattr(mathneuro.data, "load_records", lambda path, **kw: records[path])
    code = readme_example()
    assert "load_model(" in code and "apply_intervention" in code
    inside = {}
    code = code.replace("    ...  # evaluate",
                        "    inside.update(zeros=sum(int((p == 0).sum()) for p in model.parameters()))")
    scope = {"inside": inside}
    exec(compile(code, str(README), "exec"), scope)
    selection = scope["selection"]
    assert selection.num_selected() > 0
    assert inside["zeros"] >= selection.num_selected()  # pruned inside the block
    assert all(torch.equal(p, before[n]) for n, p in model.named_parameters())  # restored after


# ------------------------------------------------------------------ the quick start and the first sweep, as written

MAKEFILE = README.parent / "Makefile"


def bash_blocks(section: str) -> list[list[str]]:
    """The README section's ``bash`` blocks, each as its commands: comments cut, continuation lines joined."""
    text = README.read_text().split(f"## {section}", 1)[1].split("\n## ", 1)[0]
    blocks = []
    for block in re.findall(r"```bash\n(.*?)```", text, re.S):
        joined = re.sub(r"\\\n\s*", " ", block)
        blocks.append([line.split("  #")[0].split(" # ")[0].strip() for line in joined.splitlines()
                       if line.strip() and not line.lstrip().startswith("#")])
    return blocks


def make_recipe(target: str) -> str:
    """The command of a Makefile target (its last recipe line), with ``$(PY)`` as the activated ``python``."""
    recipe = MAKEFILE.read_text().split(f"\n{target}:", 1)[1].split("\n\n", 1)[0].splitlines()[1:]
    return recipe[-1].strip().replace("$(PY)", "python")


@pytest.mark.e2e
@pytest.mark.integration
def test_the_readmes_quick_start_and_first_sweep_run_as_written_in_a_new_shell(tiny_dir, tmp_path):
    """A new shell after ``make run``: the README's activation line, then ``make run``'s command and the first
    sweep's commands exactly as the README writes them, on the tiny model and small samples (the only
    overrides appended: the embedded model is no test's to download). The report, the W&B runs that the
    README's ``wandb sync`` line names and the group it describes are there; no install or font-cache noise."""
    venv = Path(sys.prefix)
    if not (venv / "bin" / "activate").is_file():
        pytest.skip("the tests do not run from a virtual environment")
    (quick,) = bash_blocks("Quick start")[:1]
    assert quick[:2] == ["make run", "make test"], quick
    activate = [line for line in quick if line.startswith(("source ", ". "))]
    assert activate == ["source .venv/bin/activate"], quick
    sweep_block, after_block = bash_blocks("A first sweep")[:2]
    (sweep_cmd,) = sweep_block
    report_cmd, sync_cmd = after_block
    assert sweep_cmd.startswith("mathneuro -m ") and report_cmd.startswith("mathneuro-report ")
    assert sync_cmd.startswith("wandb sync ")

    (tmp_path / ".venv").symlink_to(venv)  # the clone's .venv, made by make run
    small = (f"model.name_or_path={tiny_dir} model.name=tiny model.dtype=float32 model.device=cpu "
             f"cache_dir={tmp_path / 'cache'} num_samples=6 batch_size=4 max_length=48 eval.limit=6 "
             "eval.arith.num_problems=6")
    script = "\n".join(["set -e", *activate, f"{make_recipe('run')} {small}", f"{sweep_cmd} {small}", report_cmd])
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path / "home"), "HF_HUB_OFFLINE": "1", "WANDB_MODE": "offline",
           "MPLCONFIGDIR": str(tmp_path / "mpl"), "LANG": "C.UTF-8"}  # a new shell: nothing activated
    res = subprocess.run(["bash", "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=1200)
    out = res.stdout + res.stderr
    assert res.returncode == 0, out[-4000:]
    assert "command not found" not in out and "fontManager" not in out and "Traceback" not in out

    demo = sorted(tmp_path.glob("outputs/multirun/*/*/*/results.json"))  # where the README says make run's go
    assert len(demo) == 2 and "Scores (mean over seeds):" in res.stdout

    first = tmp_path / "outputs" / "sweeps" / "first"
    points = [json.loads(p.read_text()) for p in first.glob("*/results.json")]
    assert len(points) == 8 and all(p["status"] == "complete" for p in points)
    for name in ("points.csv", "summary.md", "scale_vs_topk.png", "scale_vs_scalar.png", "per_layer.png",
                 "paired.csv"):
        assert (first / "report" / name).is_file(), name
    # the README's wandb sync line names every point's offline run and the report's
    synced = {p.parents[1].name for p in tmp_path.glob(sync_cmd.split()[2])}
    assert synced == {p.name for p in first.glob("*/results.json") for p in [p.parent]} | {"report"}, synced
    group = json.loads((first / ".wandb_sweep.json").read_text())["group"]
    assert re.fullmatch(r"sweep-\d{4}-\d{2}-\d{2}_\d{2}-\d{2}-\d{2}", group)
    assert "`sweep-<date>_<time>`" in README.read_text()
