"""A user's own method and probe, defined in a module outside src/, run through the CLI unchanged."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from mathneuro.methods.registry import METHODS, resolve_method
from mathneuro.methods.selection import Selection
from mathneuro.models.tiny import tiny_model

pytestmark = pytest.mark.integration

PLUGIN = textwrap.dedent('''
    """A toy method (the first rows of every scored matrix) and a toy probe (share of zero weights)."""
    from dataclasses import dataclass

    import torch

    from mathneuro.evaluation.probe_registry import register_probe
    from mathneuro.methods import LinearMethodConfig, register_method
    from mathneuro.methods.selection import Selection


    @dataclass
    class FirstRowsConfig(LinearMethodConfig):
        rows: int = 1


    @register_method("first_rows", needs=("linear_inputs",), config=FirstRowsConfig)
    def first_rows(inputs, cfg):
        assert "linear_inputs" in inputs.task and len(inputs.filters) == 1 and inputs.weights
        masks = {}
        for name, weight in inputs.weights.items():
            mask = torch.zeros(weight.shape, dtype=torch.bool)
            mask[: cfg.rows] = True
            masks[name] = mask
        return Selection(masks, method="first_rows", meta={"top_k": inputs.top_k, "rows": cfg.rows})


    @register_probe("zero_share", kind="nonmath")
    def zero_share(ctx):
        weights = [m.weight for n, m in ctx.model.named_modules() if n.endswith(("q_proj", "up_proj"))]
        ctx.num_examples = len(weights)
        zeros = sum(int((w == 0).sum()) for w in weights)
        return {"zero_share": zeros / sum(w.numel() for w in weights)}
''')


@pytest.fixture(scope="module")
def plugin_dir(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("plugins")
    (folder / "toy_plugins.py").write_text(PLUGIN)
    return folder



@pytest.mark.e2e
def test_user_method_and_probe_run_through_the_cli(plugin_dir, tiny_dir, tmp_path):
    run_dir = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(plugin_dir), os.environ.get("PYTHONPATH", "")]),
           "WANDB_MODE": "offline", "HYDRA_FULL_ERROR": "0"}
    args = [f"model.name_or_path={tiny_dir}", "model.name=tiny", "model.dtype=float32", "model.device=cpu",
            f"cache_dir={tmp_path / 'cache'}", "num_samples=4", "batch_size=4", "max_length=32", "progress=false",
            "logger=none", "save_selection=true", f"hydra.run.dir={run_dir}",
            "method.name=toy_plugins:first_rows", "+method.rows=2",
            "eval.tasks=[toy_plugins:zero_share]"]
    proc = subprocess.run([sys.executable, "-m", "mathneuro", *args], cwd=tmp_path, capture_output=True, text=True,
                          timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads((run_dir / "results.json").read_text())
    assert results["point"]["method"] == "toy_plugins:first_rows"

    # the method's selection: exactly the first two rows of every scored matrix
    selection = Selection.load(run_dir / "selection.safetensors")
    assert selection.masks and selection.meta["rows"] == 2
    for mask in selection.masks.values():
        assert mask[:2].all() and not mask[2:].any()
    assert results["selection"]["num_selected"] == sum(2 * m.shape[1] for m in selection.masks.values())

    # the probe ran on the unedited and on the pruned model: pruning the rows made them zero
    before = results["baseline_metrics"]["nonmath/toy_plugins:zero_share/zero_share"]
    after = results["metrics"]["nonmath/toy_plugins:zero_share/zero_share"]
    pruned = [m for n, m in selection.masks.items() if n.endswith(("q_proj.weight", "up_proj.weight"))]
    expected = sum(int(m.sum()) for m in pruned) / sum(m.numel() for m in pruned)
    assert before == 0.0 and after == pytest.approx(expected)


def test_user_method_by_target_and_errors(plugin_dir, monkeypatch):
    monkeypatch.syspath_prepend(str(plugin_dir))
    spec, cfg = resolve_method({"_target_": "toy_plugins.first_rows", "rows": 3, "filter_top_k": None})
    assert spec.name == "first_rows" and cfg.rows == 3 and cfg.name == "first_rows"
    assert "first_rows" in METHODS  # importing the module registered it by name too
    with pytest.raises(ValueError, match=r"method\.rows: .*Int"):
        resolve_method({"name": "first_rows", "rows": "many"})
    with pytest.raises(ValueError, match=r"method\.colour: not a setting of method 'first_rows'; its settings: "):
        resolve_method({"name": "first_rows", "colour": 1})
    with pytest.raises(ValueError, match=r"unknown method 'wandaa'; did you mean 'wanda'\?"):
        resolve_method({"name": "wandaa"})
    with pytest.raises(ValueError, match=r"cannot import method 'toy_plugins:nope': module 'toy_plugins' imported "
                                         r"but has no attribute 'nope'"):
        resolve_method({"name": "toy_plugins:nope"})
    # a misspelled function: the module imported (no PYTHONPATH hint), its close names are offered
    with pytest.raises(ValueError, match=r"module 'toy_plugins' imported but has no attribute 'first_row'; "
                                         r"close names: first_rows") as err:
        resolve_method({"name": "toy_plugins.first_row"})
    assert "PYTHONPATH" not in str(err.value)
    with pytest.raises(ValueError, match=r"cannot import method 'no_such_lab:fn': no module named 'no_such_lab'; "
                                         r"is its package on PYTHONPATH\?"):
        resolve_method({"name": "no_such_lab:fn"})


def test_random_sized_by_a_user_method_with_its_own_settings(plugin_dir, monkeypatch):
    """method.reference names the user's method, method.reference_args its settings: random then
    draws exactly that many weights per matrix (two rows' worth), elsewhere than the first rows."""
    from mathneuro.methods.spec import MethodInputs
    from mathneuro.models.targets import find_target_linears, weight_parameters

    monkeypatch.syspath_prepend(str(plugin_dir))
    model, _ = tiny_model("llama")
    weights = weight_parameters(find_target_linears(model))
    inputs = MethodInputs(task={"linear_inputs": None}, filters=[{"linear_inputs": None}], weights=weights,
                          top_k=0.1, seed=0)
    spec, cfg = resolve_method({"name": "random", "reference": "toy_plugins:first_rows",
                                "reference_args": {"rows": 2}})
    sel = spec(inputs, cfg)
    assert sel.counts() == {n: 2 * w.shape[1] for n, w in weights.items()}
    assert not all(m[:2].all() for m in sel.masks.values())
    with pytest.raises(ValueError, match=r"method\.reference_args\.rows: .*Int"):
        resolve_method({"name": "random", "reference": "toy_plugins:first_rows", "reference_args": {"rows": "x"}})
    with pytest.raises(ValueError, match=r"method\.reference_args\.colour: not a setting of method 'first_rows'"):
        resolve_method({"name": "random", "reference": "toy_plugins:first_rows", "reference_args": {"colour": 1}})


def test_random_sized_by_a_user_method_pairs_with_it_under_either_name(plugin_dir, monkeypatch):
    """A point run as ``method.name=toy_plugins:first_rows`` and a random point sized by ``first_rows``
    (or the other way round) are one method's pair in paired.csv."""
    from mathneuro.report.references import serves

    monkeypatch.syspath_prepend(str(plugin_dir))
    assert serves("random(first_rows)", "toy_plugins:first_rows")
    assert serves("random(toy_plugins:first_rows)", "first_rows")
    assert serves("random(toy_plugins:first_rows)", "toy_plugins:first_rows")
    assert not serves("random(first_rows)", "toy_plugins:nope")  # does not resolve: compared as written
    assert not serves("random(wanda)", "toy_plugins:first_rows")
    assert not serves("random(first_rows)", "wanda_row")


def test_builtin_method_configs_keep_their_keys():
    spec, cfg = resolve_method({"name": "random", "filter_top_k": 0.1, "reference": "mathneuro",
                                "targets": "mlp", "include_lm_head": True, "filter_rate": 0.5})
    assert (spec.needs, cfg.filter_top_k, cfg.targets, cfg.include_lm_head) == (("linear_inputs",), 0.1, "mlp", True)
    spec, cfg = resolve_method({"name": "lape", "filter_rate": 0.9, "activation_bar": 0.8, "targets": "x"})
    assert spec.needs == ("activation_counts",) and (cfg.filter_rate, cfg.activation_bar) == (0.9, 0.8)
    assert spec.unit == "neurons" and spec.reference == "random_neurons"
    with pytest.raises(ValueError, match=r"method\.activation_bar: must be in \(0, 1\)"):
        resolve_method({"name": "lape", "activation_bar": 1.5})


def test_user_probe_in_process_kind_override_and_errors(plugin_dir, monkeypatch):
    from mathneuro.evaluation import EvalConfig, Evaluator

    monkeypatch.syspath_prepend(str(plugin_dir))
    model, tok = tiny_model("llama")
    cfg = EvalConfig(tasks=["toy_plugins:zero_share"], math_tasks=["toy_plugins:zero_share"], progress=False)
    ev = Evaluator(model, tok, cfg)
    assert ev.evaluate() == {"math/toy_plugins:zero_share/zero_share": 0.0}
    assert ev.last_num_examples["toy_plugins:zero_share"] == 2 * model.config.num_hidden_layers
    ev2 = Evaluator(model, tok, EvalConfig(tasks=["zero_share"], progress=False))  # registered by the import above
    assert list(ev2.evaluate()) == ["nonmath/zero_share/zero_share"]
    with pytest.raises(ValueError, match=r"unknown task 'arithh'; did you mean '?arith'?\?"):
        EvalConfig(tasks=["arithh"]).validate()
    with pytest.raises(ValueError, match=r"eval\.tasks: cannot import probe 'toy_plugins:nope'"):
        EvalConfig(tasks=["toy_plugins:nope"]).validate()
