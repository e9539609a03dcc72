"""The README's Python example is public API users copy: it runs as written, on a tiny model and records
in place of the Hub model and the data files it names."""

from __future__ import annotations

import re
from pathlib import Path

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
    code = code.replace("    ...  # evaluate", "    inside.update(zeros=sum(int((p == 0).sum()) for p in model.parameters()))")
    scope = {"inside": inside}
    exec(compile(code, str(README), "exec"), scope)
    selection = scope["selection"]
    assert selection.num_selected() > 0
    assert inside["zeros"] >= selection.num_selected()  # pruned inside the block
    assert all(torch.equal(p, before[n]) for n, p in model.named_parameters())  # restored after
