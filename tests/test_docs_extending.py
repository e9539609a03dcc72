"""docs/extending.md's worked example runs as written: the user's module and its four method configs,
taken from the page, select on a tiny model; each random reference matches its method's size, per
matrix and per MLP layer."""

from __future__ import annotations

import importlib
import re
import sys
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from mathneuro.edit.interventions import InterventionContext, default_intervention_node, resolve_intervention
from mathneuro.edit.interventions.registry import INTERVENTIONS
from mathneuro.methods.registry import METHODS, resolve_method
from mathneuro.methods.selection import Selection
from mathneuro.methods.spec import MethodInputs
from mathneuro.models.targets import find_target_linears, weight_parameters
from mathneuro.models.tiny import tiny_model
from mathneuro.statistics import collect_statistics

PAGE = Path(__file__).resolve().parents[1] / "docs" / "extending.md"
KINDS = ("linear_inputs", "activation_counts")


def blocks(lang: str) -> dict[str, str]:
    """The page's ``lang`` code blocks whose first line is a ``# <file>`` comment, by file name."""
    out = {}
    for body in re.findall(rf"```{lang}\n(.*?)```", PAGE.read_text(), re.S):
        first = body.splitlines()[0]
        if first.startswith("# lab/"):
            out[first[2:].strip()] = body
    return out


@pytest.fixture
def my_methods(tmp_path, monkeypatch):
    """The page's module, importable as ``my_methods``; its registrations are undone afterwards."""
    (tmp_path / "my_methods.py").write_text(blocks("python")["lab/my_methods.py"])
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(METHODS, "_entries", dict(METHODS._entries))
    yield importlib.import_module("my_methods")
    sys.modules.pop("my_methods", None)


def test_the_worked_example_selects_and_its_references_match_each_methods_size(my_methods):
    configs = {Path(name).stem: OmegaConf.to_container(OmegaConf.create(text)) for name, text in blocks("yaml").items()}
    assert set(configs) == {"largest", "random_largest", "firing_gap", "random_firing_gap"}
    model, tok = tiny_model("llama")
    math = collect_statistics(model, tok, ["1 + 2 = 3", "7 * 8 = 56", "9 - 4 = 5"], kinds=KINDS, progress=False)
    other = collect_statistics(model, tok, ["The cat sat on the mat.", "Rain fell all day."], kinds=KINDS,
                               progress=False)
    inputs = MethodInputs(task=math, filters=[other], weights=weight_parameters(find_target_linears(model)),
                          top_k=0.1, seed=0, model=model)
    picked = {}
    for option, node in configs.items():
        spec, cfg = resolve_method(node)
        picked[option] = (spec, spec(inputs, cfg))

    largest_spec, largest = picked["largest"]
    gap_spec, gap = picked["firing_gap"]
    assert largest_spec.unit == "weights" and largest_spec.reference == "random"
    assert gap_spec.unit == "neurons" and gap_spec.reference == "random_neurons"
    assert largest.meta["power"] == 2.0 and largest.num_selected() > 0
    assert gap.meta["layers"] > 0 and gap.num_selected() > 0
    # each reference is sized by the user's method, with its settings, not by MathNeuro or LAPE
    assert picked["random_largest"][1].counts() == largest.counts()
    assert picked["random_largest"][1].masks.keys() == largest.masks.keys()
    assert picked["random_firing_gap"][1].counts() == gap.counts()
    assert picked["random_firing_gap"][1].meta["reference"] == "my_methods:firing_gap"


@pytest.fixture
def my_interventions(tmp_path, monkeypatch):
    """The page's intervention module, importable as ``my_interventions``; its registration is undone afterwards."""
    (tmp_path / "my_interventions.py").write_text(blocks("python")["lab/my_interventions.py"])
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(INTERVENTIONS, "_entries", dict(INTERVENTIONS._entries))
    yield importlib.import_module("my_interventions")
    sys.modules.pop("my_interventions", None)


def test_the_intervention_example_permutes_only_the_selection_and_undoes_exactly(my_interventions):
    model, tok = tiny_model("qwen2")
    weights = weight_parameters(find_target_linears(model))
    gen = torch.Generator().manual_seed(0)
    selection = Selection({n: torch.rand(w.shape, generator=gen) < 0.2 for n, w in weights.items()})
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    # named by import path, from a node holding every built-in setting (as the runner's is)
    spec, cfg = resolve_intervention({**default_intervention_node(), "name": "my_interventions:shuffle"})
    assert spec.name == "shuffle" and spec.units == ("weights",) and cfg.seed == 0
    with spec(InterventionContext(model=model, tokenizer=tok, selection=selection), cfg) as edit:
        for name, p in model.named_parameters():
            mask = selection.masks.get(name)
            if mask is None:
                assert torch.equal(p, before[name])
                continue
            assert torch.equal(p[~mask], before[name][~mask])
            assert torch.equal(p[mask].sort().values, before[name][mask].sort().values)  # the same values
            assert not torch.equal(p[mask], before[name][mask])  # in other places
        assert edit.record == {"matrices": len(selection.masks), "seed": 0}
    assert all(torch.equal(p, before[n]) for n, p in model.named_parameters())
    assert spec.point(cfg) == {"scalar": None, "intervention_args": {"seed": 0}}
