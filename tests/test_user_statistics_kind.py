"""A researcher's own statistics kind, written outside the package, feeds a method as the built-in kinds do.

The kind (each input channel's largest absolute activation of the scored linears) and a method that
needs it by import path (the top-K weights of every matrix by |W| · channel max) live in the user's
module. A multirun over seeds runs the real CLI; the selection each point saves matches the same math
computed here from a plain forward pass per sample. Nothing in ``src/`` names them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

pytestmark = pytest.mark.integration

USER_MODULE = textwrap.dedent('''
    """My lab's statistics kind and the method that uses it."""
    from dataclasses import dataclass

    import torch

    from mathneuro.methods import LinearMethodConfig, Selection, register_method, topk_count, topk_mask
    from mathneuro.statistics import register_statistics_kind


    @register_statistics_kind("channel_max", modules="linears", hook="input")
    class ChannelMax:
        """Per scored linear and input channel: the largest |activation| over the real tokens."""

        def __init__(self, modules, kernel):
            self.max = {name: torch.zeros(m.in_features, dtype=torch.float32, device=m.weight.device)
                        for name, m in modules.items()}
            self.mask = None

        def new_batch(self, mask, padded):
            self.mask = mask

        def hook(self, name):
            def pre_hook(module, args):
                x = args[0].detach().abs().float() * self.mask.to(args[0].device).unsqueeze(-1)
                torch.maximum(self.max[name], x.amax(dim=(0, 1)).to(self.max[name].device), out=self.max[name])
            return pre_hook

        def state(self):
            return {"channel_max": self.max}

        def tensors(self):
            return {f"{name}::max": t.cpu() for name, t in self.max.items()}


    @dataclass
    class MaxWeightConfig(LinearMethodConfig):
        name: str = "max_weight"


    @register_method("max_weight", needs=("my_kinds:ChannelMax",), config=MaxWeightConfig, topk_per_matrix=True,
                     uses_filters=False)
    def max_weight(inputs, cfg):
        """The top-K of |W| · (input channel's max |activation|) in every scored matrix."""
        stats = inputs.task["channel_max"]
        masks = {}
        for name, w in inputs.weights.items():
            score = w.detach().abs().float() * stats.get(name.removesuffix(".weight"), "max").to(w.device)[None, :]
            masks[name] = topk_mask(score, topk_count(score.numel(), inputs.top_k))
        return Selection(masks, method="max_weight", meta={"matrices": len(masks)})
''')

RECORDS = [{"question": f"What is {a} + {b}?", "answer": f"{a} + {b} = {a + b}."} for a, b in
           [(1, 2), (17, 25), (300, 4), (8, 8), (123, 456), (9, 0)]]
TEMPLATE = "Question: {question}\nAnswer: {answer}"
TOP_K = 0.2
MAX_LENGTH = 48


@pytest.fixture(scope="module")
def user_lab(tmp_path_factory) -> Path:
    """The user's module and task data, outside the repository."""
    root = tmp_path_factory.mktemp("lab")
    (root / "my_kinds.py").write_text(USER_MODULE)
    (root / "sums.jsonl").write_text("".join(json.dumps(r) + "\n" for r in RECORDS))
    return root


def reference_selection(model_dir: Path) -> dict[str, torch.Tensor]:
    """The top-K of |W| · channel max of every scored linear, from one unpadded forward pass per sample."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from mathneuro.models.targets import find_target_linears

    model = AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32).eval()
    tok = AutoTokenizer.from_pretrained(model_dir)
    linears = find_target_linears(model)
    peak = {name: torch.zeros(m.in_features) for name, m in linears.items()}
    handles = [m.register_forward_pre_hook(
        lambda _m, args, name=name: peak.__setitem__(name, torch.maximum(peak[name], args[0].abs().amax(dim=(0, 1)))))
        for name, m in linears.items()]
    with torch.no_grad():
        for record in RECORDS:  # every record once: the channel max does not depend on their order
            ids = tok(TEMPLATE.format(**record), truncation=True, max_length=MAX_LENGTH)["input_ids"]
            model.model(input_ids=torch.tensor([ids]))
    for handle in handles:
        handle.remove()
    out = {}
    for name, linear in linears.items():
        score = linear.weight.detach().abs() * peak[name][None, :]
        k = int(TOP_K * score.numel() + 1e-9)
        mask = torch.zeros(score.numel(), dtype=torch.bool)
        mask[torch.topk(score.reshape(-1), k).indices] = True
        out[f"{name}.weight"] = (mask.reshape(score.shape), score)
    return out


@pytest.mark.e2e
def test_a_user_statistics_kind_feeds_a_user_method_in_a_sweep(user_lab, tiny_dir, tmp_path):
    from mathneuro.methods.selection import Selection

    sweep = tmp_path / "sweep"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(user_lab), os.environ.get("PYTHONPATH", "")]),
           "WANDB_MODE": "offline", "HYDRA_FULL_ERROR": "0"}
    args = ["-m", f"model.name_or_path={tiny_dir}", "model.name=tiny", "model.dtype=float32", "model.device=cpu",
            f"cache_dir={tmp_path / 'cache'}", f"task.path={user_lab / 'sums.jsonl'}", "task.name=sums",
            f"num_samples={len(RECORDS)}", "bootstrap=false", "batch_size=4", f"max_length={MAX_LENGTH}",
            "progress=false", f"top_k={TOP_K}", "method.name=my_kinds:max_weight", "seed=0,1", "eval=none",
            "logger=none", "save_selection=true", f"hydra.sweep.dir={sweep}"]
    proc = subprocess.run([sys.executable, "-m", "mathneuro", *args], cwd=tmp_path, capture_output=True, text=True,
                          timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    runs = sorted(p.parent for p in sweep.glob("*/results.json"))
    assert len(runs) == 2
    reference = reference_selection(tiny_dir)
    for run in runs:
        result = json.loads((run / "results.json").read_text())
        assert result["point"]["method"] == "my_kinds:max_weight"
        assert result["selection"]["meta"]["matrices"] == len(reference)
        masks = Selection.load(run / "selection.safetensors").masks
        assert set(masks) == set(reference)
        for name, (expected, score) in reference.items():
            got = masks[name].bool()
            assert int(got.sum()) == int(expected.sum())
            differ = got != expected
            if differ.any():  # only where two scores tie at the K-th place up to float rounding
                kth = score[expected].min()
                assert torch.allclose(score[differ], kth.expand(int(differ.sum())), rtol=1e-5), name
