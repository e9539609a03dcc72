"""The same results on CUDA as on CPU: statistics, selections, interventions and a whole point.

Skipped where no CUDA device is present (CI); run on a GPU machine by ``experiments/benchmarks/gpu_check.sh``.
Every test compares a CUDA result with the CPU result of the same inputs, so a device bug shows as a
difference, not merely as a crash.
"""

from __future__ import annotations

import json

import pytest
import torch
from omegaconf import OmegaConf

from mathneuro.edit.undoable import apply_intervention
from mathneuro.methods import mathneuro_selection, random_selection, topk_count, wanda_selection
from mathneuro.methods.selection import Selection
from mathneuro.models import resolve_device
from mathneuro.models.targets import find_target_linears
from mathneuro.models.tiny import tiny_model
from mathneuro.pipeline.runner import run_point
from mathneuro.statistics.passes import collect_statistics
from tests.conftest import TEXTS
from tests.test_runner import base_overrides, compose_cfg

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")

MATH = TEXTS[::2]
NONMATH = TEXTS[1::2]


def stats_on(device: str, kernel: str = "eager", dtype: torch.dtype = torch.float32, texts=MATH, arch="llama"):
    model, tok = tiny_model(arch)  # float32 weights, then cast: the same model in every dtype
    model.to(device=device, dtype=dtype)
    return collect_statistics(model, tok, texts, kinds=("linear_inputs", "activation_counts"), batch_size=3,
                              max_length=64,
                              progress=False, kernel=kernel)


def worst_relative_gaps(got, ref) -> dict[str, float]:
    """Per statistic, the largest |got - ref| / |ref| (ref floored at 1e-3), largest first."""
    gaps = {k: float(((got.tensors[k] - v).abs() / v.abs().clamp_min(1e-3)).max()) for k, v in ref.tensors.items()}
    return dict(sorted(gaps.items(), key=lambda kv: -kv[1]))


def weights_of(model) -> dict[str, torch.Tensor]:
    return {f"{name}.weight": mod.weight for name, mod in find_target_linears(model).items()}


def test_auto_device_is_cuda():
    assert resolve_device("auto").type == "cuda"


@pytest.mark.parametrize("arch", ["llama", "qwen2", "gemma2", "phi"])
@pytest.mark.parametrize("kernel", ["eager", "compiled"])
def test_statistics_on_cuda_match_cpu(arch, kernel):
    cpu = stats_on("cpu", arch=arch)
    gpu = stats_on("cuda", kernel=kernel, arch=arch)
    lin_c, lin_g = cpu["linear_inputs"], gpu["linear_inputs"]
    assert lin_g.tensors.keys() == lin_c.tensors.keys() and lin_g.num_tokens == lin_c.num_tokens
    for key, ref in lin_c.tensors.items():
        got = lin_g.tensors[key]
        assert got.device.type == "cpu" and got.dtype == torch.float32  # cached and compared on CPU
        torch.testing.assert_close(got, ref, rtol=1e-4, atol=1e-5)
    for key, ref in cpu["activation_counts"].tensors.items():
        got = gpu["activation_counts"].tensors[key]
        assert got.dtype == torch.int64
        # a count may move only where an activation sits within float error of zero
        assert int((got - ref).abs().sum()) <= max(2, int(ref.sum()) // 1000), key


def test_bf16_model_on_cuda_accumulates_in_float32():
    """bf16 activations, float32 sums: as close to the float32 statistics as the CPU's bf16 pass is."""
    ref = stats_on("cpu")["linear_inputs"]
    cpu_bf16 = stats_on("cpu", dtype=torch.bfloat16)["linear_inputs"]
    got = stats_on("cuda", dtype=torch.bfloat16)["linear_inputs"]
    assert all(v.dtype == torch.float32 for v in got.tensors.values())
    assert got.num_tokens == ref.num_tokens
    cpu_gap = max(worst_relative_gaps(cpu_bf16, ref).values())
    gaps = worst_relative_gaps(got, ref)
    # on the failure, every statistic's gap to float32 and to the CPU's bf16 pass (where a CUDA path departs)
    to_cpu_bf16 = worst_relative_gaps(got, cpu_bf16)
    detail = {k: (round(v, 4), round(to_cpu_bf16[k], 4)) for k, v in gaps.items()}
    assert max(gaps.values()) <= max(3e-2, 2 * cpu_gap), f"cpu bf16 gap {cpu_gap:.4f}; cuda bf16 gaps {detail}"


def test_selections_from_cuda_weights_equal_cpu_selections():
    task, filt = stats_on("cpu")["linear_inputs"], stats_on("cpu", texts=NONMATH)["linear_inputs"]
    model, _ = tiny_model("llama")
    cpu_w = weights_of(model)
    gpu_w = {k: v.to("cuda") for k, v in cpu_w.items()}
    for select in (lambda w: mathneuro_selection(w, task, [filt], top_k=0.2),
                   lambda w: wanda_selection(w, task, top_k=0.2),
                   lambda w: wanda_selection(w, task, top_k=0.2, per_row=True)):
        a, b = select(cpu_w), select(gpu_w)
        assert a.masks.keys() == b.masks.keys()
        for name in a.masks:
            assert b.masks[name].device.type == "cpu"
            assert torch.equal(a.masks[name], b.masks[name]), name
    counts = {k: topk_count(v.numel(), 0.1) for k, v in cpu_w.items()}
    shapes = {k: v.shape for k, v in cpu_w.items()}
    r_cpu, r_gpu = random_selection(shapes, counts, seed=3), random_selection(shapes, counts, seed=3)
    assert all(torch.equal(r_cpu.masks[k], r_gpu.masks[k]) for k in shapes)  # drawn on CPU: device-independent


def test_intervention_on_cuda_prunes_scales_and_undoes_exactly():
    model, _ = tiny_model("llama")
    model.to("cuda")
    weights = weights_of(model)
    before = {k: v.detach().clone() for k, v in weights.items()}
    counts = {k: topk_count(v.numel(), 0.1) for k, v in weights.items()}
    sel = random_selection({k: v.shape for k, v in weights.items()}, counts, seed=0)
    act = "model.layers.0.mlp.act_fn"
    sel.neurons = {act: torch.tensor([0, 5, 7])}
    x = torch.randint(3, 200, (2, 12), device="cuda")
    with torch.no_grad():
        handle = apply_intervention(model, sel, 0.0)
        for name, w in weights.items():
            mask = sel.masks[name].to("cuda")
            assert bool((w[mask] == 0).all()) and torch.equal(w[~mask], before[name][~mask])
        seen = {}
        hook = dict(model.named_modules())[act].register_forward_hook(
            lambda _m, _a, out: seen.setdefault("out", out.detach().clone()))
        model(x)
        hook.remove()
        assert bool((seen["out"][..., [0, 5, 7]] == 0).all())
        handle.undo()
    for name, w in weights.items():
        assert torch.equal(w, before[name]), name


@pytest.mark.integration
def test_a_point_on_cuda_selects_what_the_cpu_point_selects(tiny_dir, tmp_path):
    def run(device: str) -> tuple[dict, Selection]:
        overrides = [o for o in base_overrides(tiny_dir, tmp_path / f"cache-{device}")
                     if not o.startswith("model.device")]
        cfg = compose_cfg([*overrides, f"model.device={device}", "eval=quick", "eval.limit=4", "logger=none",
                           "save_selection=true", "top_k=0.1"])
        out = tmp_path / device
        run_point(OmegaConf.to_object(cfg), out)
        return json.loads((out / "results.json").read_text()), Selection.load(out / "selection.safetensors")

    res_cpu, sel_cpu = run("cpu")
    res_gpu, sel_gpu = run("auto")
    assert res_gpu["status"] == "complete" and res_gpu["hardware"]["device"].startswith("cuda")
    assert res_gpu["hardware"]["device_name"] and res_gpu["peak_memory"]["identification"]["cuda_mb"] > 0
    assert res_gpu["selection"]["num_selected"] == res_cpu["selection"]["num_selected"]
    same = sum(int((sel_cpu.masks[k] & sel_gpu.masks[k]).sum()) for k in sel_cpu.masks)
    assert same >= 0.99 * res_cpu["selection"]["num_selected"]  # float order may flip a borderline weight
    assert res_gpu["metrics"].keys() == res_cpu["metrics"].keys()
    for key, value in res_cpu["metrics"].items():
        if "arith" in key and "stderr" not in key:  # greedy generation of the same tiny model
            assert abs(res_gpu["metrics"][key] - value) <= 0.25, key
