"""Every failure a user can cause is one line and exit code 2; nothing is lost on the way.

Bad values and types, missing or damaged models, unwritable directories and selections that
edit nothing are refused before any evaluation; damaged cache entries heal; an unreachable
W&B server leaves offline runs; SIGTERM mid-point leaves nothing partial behind.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

from mathneuro.models.tiny import tiny_model
from mathneuro.pipeline.config import ConfigError
from mathneuro.pipeline.preflight import check_model_source, gguf_problem, safetensors_problem, smallest_top_k
from mathneuro.pipeline.runner import run_point
from mathneuro.statistics.cache import StatisticsCache, cached_statistics

from .conftest import TEXTS
from .test_runner import base_overrides, cli, compose_cfg


def error_line(res: subprocess.CompletedProcess) -> str:
    """The command's one error line; fails unless stderr holds exactly one ``mathneuro: error:`` line."""
    lines = [ln for ln in res.stderr.splitlines() if ln.startswith("mathneuro: error:")]
    assert len(lines) == 1, res.stderr[-3000:]
    assert "Traceback" not in res.stderr and "HYDRA_FULL_ERROR" not in res.stderr, res.stderr[-3000:]
    return lines[0]


def write_gguf(path: Path) -> Path:
    """A small GGUF file (metadata and two tensors) written with the gguf package."""
    from gguf import GGUFWriter

    writer = GGUFWriter(str(path), "llama")
    writer.add_block_count(1)
    writer.add_token_list([f"tok{i}" for i in range(50)])
    writer.add_tensor("token_embd.weight", np.ones((50, 16), dtype=np.float32))
    writer.add_tensor("blk.0.ffn_up.weight", np.ones((32, 16), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def truncate(path: Path, keep: int) -> None:
    data = path.read_bytes()
    path.write_bytes(data[:keep])


# ------------------------------------------------------------------------------------- one line, exit 2


@pytest.mark.parametrize(
    ("overrides", "key", "words"),
    [
        (["num_samples=abc"], "num_samples", "integer"),
        (["method=nope"], "method", "mathneuro"),
        (["model.name_or_path=./no/such/model"], "model.name_or_path", "does not exist"),
        (["cache_dir=/proc/forbidden"], "cache_dir", "cannot write"),
    ],
)
@pytest.mark.integration
def test_user_errors_are_one_line_and_exit_2(tiny_dir, tmp_path, overrides, key, words):
    res = cli([*base_overrides(tiny_dir, tmp_path / "cache"), "eval=none", "logger=none",
               f"hydra.run.dir={tmp_path / 'out'}", *overrides], cwd=tmp_path, timeout=120)
    assert res.returncode == 2, res.stderr[-3000:]
    line = error_line(res)
    assert line.startswith(f"mathneuro: error: {key}: ") and words in line, line
    assert not (tmp_path / "out" / "results.json").exists()


@pytest.mark.parametrize(
    ("override", "line"),
    [
        ("num_samples=abc", "num_samples: must be an integer, got 'abc'"),
        ("top_k=lots", "top_k: must be a number, got 'lots'"),
        ("save_selection=maybe", "save_selection: must be true or false, got 'maybe'"),
        ("eval.limit=abc", "eval.limit: must be a number, got 'abc'"),
        ("method=nope", "method: unknown option 'nope'; allowed: lape, mathneuro, random, random_neurons, "
                        "random_wanda, wanda, wanda_row"),
        ("nosuchkey=1", "nosuchkey: no such config key; check the spelling, or add a new key with +nosuchkey=..."),
        ("top_k=[1", "overrides: "),
    ],
)
def test_hydra_composition_errors_become_one_line_naming_the_key(override, line):
    from mathneuro.cli.errors import user_error

    with pytest.raises(Exception) as info:  # noqa: PT011 - Hydra raises several kinds
        compose_cfg([override])
    said = user_error(info.value)
    assert said is not None and said.startswith(line) and "\n" not in said, said


@pytest.mark.e2e
@pytest.mark.integration
def test_unwritable_output_dir_is_one_line(tiny_dir, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    res = cli([*base_overrides(tiny_dir, tmp_path / "cache"), "eval=none", "logger=none",
               f"hydra.run.dir={blocker / 'out'}"], cwd=tmp_path, timeout=120)
    assert res.returncode == 2
    assert error_line(res).startswith("mathneuro: error: hydra.run.dir: ")


@pytest.mark.e2e
@pytest.mark.integration
def test_debug_switch_keeps_the_traceback(tiny_dir, tmp_path):
    res = cli([*base_overrides(tiny_dir, tmp_path / "cache"), "num_samples=abc"], cwd=tmp_path, timeout=120,
              env={"MATHNEURO_DEBUG": "1"})
    assert res.returncode == 2
    assert "Traceback" in res.stderr
    assert res.stderr.strip().splitlines()[-1].startswith("mathneuro: error: num_samples: ")


@pytest.mark.e2e
@pytest.mark.integration
def test_truncated_gguf_is_named_as_damaged(tmp_path):
    good = write_gguf(tmp_path / "model.gguf")
    assert gguf_problem(good) is None
    size = good.stat().st_size
    for keep in (10, 200, size - 1):  # inside the header, inside the metadata, inside the tensor data
        bad = tmp_path / f"cut-{keep}.gguf"
        bad.write_bytes(good.read_bytes()[:keep])
        assert gguf_problem(bad), keep
        with pytest.raises(ConfigError, match=rf"model.name_or_path: .*cut-{keep}.gguf.* damaged or incomplete"):
            check_model_source(str(bad))
    res = cli(["model.name_or_path=" + str(tmp_path / f"cut-{size - 1}.gguf"), "model.name=x", "eval=none",
               "logger=none", f"cache_dir={tmp_path / 'cache'}", f"hydra.run.dir={tmp_path / 'out'}"],
              cwd=tmp_path, timeout=120)
    assert res.returncode == 2
    line = error_line(res)
    assert f"cut-{size - 1}.gguf" in line and "damaged or incomplete" in line


@pytest.mark.slow
def test_real_gguf_files_pass_the_check():
    """The K-quant GGUFs of ../shared/models pass the header check (fetched by its fetch-models.sh into
    ``$MATHNEURO_MODELS_DIR``, default ~/.cache/mathneuro-models)."""
    root = Path(os.environ.get("MATHNEURO_MODELS_DIR") or Path.home() / ".cache" / "mathneuro-models")
    files = sorted(root.glob("*/model.gguf"))
    if not files:
        pytest.skip(f"no GGUF under {root}: run ../shared/models/fetch-models.sh {root}")
    for path in files:
        assert gguf_problem(path) is None, path


@pytest.mark.integration
def test_damaged_safetensors_model_is_refused_before_loading(tiny_dir, tmp_path):
    model_dir = tmp_path / "model"
    shutil.copytree(tiny_dir, model_dir)
    weights = model_dir / "model.safetensors"
    assert safetensors_problem(weights) is None
    truncate(weights, weights.stat().st_size - 100)
    assert "file has" in safetensors_problem(weights)
    res = cli([*base_overrides(model_dir, tmp_path / "cache"), "eval=none", "logger=none",
               f"hydra.run.dir={tmp_path / 'out'}"], cwd=tmp_path, timeout=120)
    assert res.returncode == 2
    line = error_line(res)
    assert "model.safetensors" in line and "damaged or incomplete" in line
    weights.write_bytes(struct.pack("<Q", 10**6) + b"{}")  # a header longer than the file
    with pytest.raises(ConfigError, match="damaged or incomplete"):
        check_model_source(str(model_dir))


def test_hub_ids_stay_valid_and_missing_paths_do_not():
    check_model_source("HuggingFaceTB/SmolLM2-135M")  # resolved (and maybe refused) only when loading
    check_model_source("embedded://smollm2-135m")
    for path in ("/no/such/dir", "./model", "~/nothing-here", "weights.gguf"):
        with pytest.raises(ConfigError, match="model.name_or_path: local path .* does not exist"):
            check_model_source(path)


# ------------------------------------------------------------------------- a selection that edits nothing


@pytest.mark.e2e
@pytest.mark.integration
def test_top_k_that_selects_nothing_is_refused_with_the_smallest_that_does(tiny_dir, tmp_path):
    res = cli([*base_overrides(tiny_dir, tmp_path / "cache"), "top_k=1e-9", "eval=quick", "eval.limit=2",
               "logger=none", f"hydra.run.dir={tmp_path / 'out'}"], cwd=tmp_path, timeout=120)
    assert res.returncode == 2, res.stderr[-3000:]
    line = error_line(res)
    assert line.startswith("mathneuro: error: top_k: 1e-09 selects no weight")
    smallest = float(re.search(r"smallest top-K that selects something here is ([0-9.e-]+)", line).group(1))
    assert not (tmp_path / "out" / "results.json").exists()
    assert not (tmp_path / "cache" / "baselines").exists()  # refused before any evaluation
    model, _ = tiny_model("llama")
    from mathneuro.models.targets import find_target_linears

    shapes = {n: tuple(m.weight.shape) for n, m in find_target_linears(model).items()}
    assert smallest == smallest_top_k("mathneuro", shapes)
    assert smallest >= 1 / max(np.prod(s) for s in shapes.values())
    for method in ("mathneuro", "wanda", "random", "wanda_row"):  # the suggested value does select something
        k = smallest_top_k(method, shapes)
        cfg = compose_cfg([*base_overrides(tiny_dir, tmp_path / "cache"), f"method={method}", f"top_k={k}",
                           "eval=none", "logger=none"])
        results = run_point(OmegaConf.to_object(cfg), tmp_path / f"ok-{method}")
        assert results["selection"]["num_selected"] > 0, method


def test_lape_selecting_no_neuron_is_refused_with_a_working_top_k(tiny_dir, tmp_path):
    cfg = compose_cfg([*base_overrides(tiny_dir, tmp_path / "cache"), "method=lape", "top_k=1e-6",
                       "eval=quick", "eval.limit=2", "logger=none"])
    with pytest.raises(ConfigError, match=r"^top_k: 1e-06 selects no neuron") as info:
        run_point(OmegaConf.to_object(cfg), tmp_path / "out")
    assert not (tmp_path / "out" / "results.json").exists()
    smallest = float(re.search(r"is ([0-9.e-]+)$", str(info.value)).group(1))
    cfg = compose_cfg([*base_overrides(tiny_dir, tmp_path / "cache"), "method=lape", f"top_k={smallest}",
                       "eval=none", "logger=none"])
    assert run_point(OmegaConf.to_object(cfg), tmp_path / "ok")["selection"]["num_selected"] > 0


# ------------------------------------------------------------------------------------ caches that heal


def count_forwards(model):
    calls = {"n": 0}
    model.model.register_forward_pre_hook(lambda *_: calls.__setitem__("n", calls["n"] + 1))
    return calls


@pytest.mark.parametrize("damage", ["truncate", "garbage", "swap", "shape", "modules", "count"])
def test_damaged_statistics_entry_is_recomputed_rewritten_and_then_read(tmp_path, caplog, damage):
    model, tok = tiny_model("llama")
    calls = count_forwards(model)
    kw = dict(model_identity={"name": "tiny"}, kinds=("linear_inputs",), progress=False)
    first, keys = cached_statistics(StatisticsCache(tmp_path), model, tok, TEXTS, **kw)
    _, other = cached_statistics(StatisticsCache(tmp_path), model, tok, TEXTS[:3], **kw)
    key = keys["linear_inputs"]
    tensors, meta = tmp_path / f"{key}.safetensors", tmp_path / f"{key}.json"
    if damage == "truncate":
        truncate(tensors, tensors.stat().st_size // 2)
    elif damage == "garbage":
        tensors.write_bytes(b"\x00" * 64)
    elif damage == "swap":  # another entry's (valid) tensors under this key
        shutil.copy(tmp_path / f"{other['linear_inputs']}.safetensors", tensors)
    else:
        data = json.loads(meta.read_text())
        if damage == "shape":
            name = next(iter(data["shapes"]))
            data["shapes"][name] = [1]
        elif damage == "modules":
            data["shapes"] = {"x::norm": [1]}
        else:
            data["num_samples"] += 1
        meta.write_text(json.dumps(data))
    n = calls["n"]
    cache = StatisticsCache(tmp_path)
    with caplog.at_level("WARNING", logger="mathneuro"):
        healed, _ = cached_statistics(cache, model, tok, TEXTS, **kw)
    warnings = [r.getMessage() for r in caplog.records if "statistics cache" in r.getMessage()]
    assert len(warnings) == 1 and key in warnings[0] and "\n" not in warnings[0]
    assert cache.misses == 1 and calls["n"] > n  # recomputed
    for name, value in first["linear_inputs"].tensors.items():
        assert torch.equal(value, healed["linear_inputs"].tensors[name])
    n = calls["n"]
    again = StatisticsCache(tmp_path)  # the next run reads the rewritten entry, without a forward pass
    cached_statistics(again, model, tok, TEXTS, **kw)
    assert again.hits == 1 and again.misses == 0 and calls["n"] == n


def test_an_interrupted_save_leaves_no_entry(tmp_path, monkeypatch):
    import mathneuro.statistics.cache as cache_mod

    model, tok = tiny_model("llama")
    stats, keys = cached_statistics(StatisticsCache(None), model, tok, TEXTS, model_identity={"n": 1},
                                    kinds=("linear_inputs",), progress=False)

    def interrupted(*_a, **_k):
        raise KeyboardInterrupt

    monkeypatch.setattr(cache_mod, "write_json_atomic", interrupted)
    with pytest.raises(KeyboardInterrupt):
        StatisticsCache(tmp_path).save(keys["linear_inputs"], stats["linear_inputs"])
    assert list(tmp_path.iterdir()) == []


def test_damaged_baseline_entry_is_recomputed_rewritten_and_then_read(tmp_path, caplog):
    from mathneuro.models import model_identity
    from mathneuro.pipeline.workbench import Workbench

    model, tok = tiny_model("llama")
    eval_cfg = OmegaConf.to_object(compose_cfg(["eval=quick", "eval.limit=2", "progress=false"])).eval

    def bench():
        return Workbench(model, tok, model_identity(model, "tiny", "float32"), StatisticsCache(tmp_path))

    first = bench().baseline(eval_cfg)
    (path,) = (tmp_path / "baselines").glob("*.json")
    truncate(path, path.stat().st_size // 2)
    with caplog.at_level("WARNING", logger="mathneuro"):
        healed = bench().baseline(eval_cfg)
    assert healed == first
    assert any("baseline cache" in r.getMessage() and path.name in r.getMessage() for r in caplog.records)
    assert json.loads(path.read_text())["metrics"] == first  # rewritten whole
    calls = count_forwards(model)
    assert bench().baseline(eval_cfg) == first and calls["n"] == 0  # read, not evaluated


# ------------------------------------------------------------------------------------------------- W&B


def wandb_records(run_dir: Path) -> list:
    """The records of an offline run's ``.wandb`` file (leveldb-log framing of protobuf records)."""
    from wandb.proto import wandb_internal_pb2 as pb

    (path,) = run_dir.glob("run-*.wandb")
    data = path.read_bytes()
    assert data[:4] == b":W&B"
    out, pos, buf, block = [], 7, b"", 32768
    while pos + 7 <= len(data):
        if block - pos % block < 7:
            pos += block - pos % block
            continue
        _crc, length, kind = struct.unpack_from("<IHB", data, pos)
        chunk, pos = data[pos + 7: pos + 7 + length], pos + 7 + length
        if kind == 0:
            continue
        buf = chunk if kind in (1, 2) else buf + chunk
        if kind in (1, 4):
            rec = pb.Record()
            rec.ParseFromString(buf)
            out.append(rec)
    return out


def wandb_summary(run_dir: Path) -> dict:
    summary = {}
    for rec in wandb_records(run_dir):
        if rec.WhichOneof("record_type") == "summary":
            for item in rec.summary.update:
                summary[item.key] = json.loads(item.value_json)
    return summary


@pytest.mark.e2e
@pytest.mark.integration
def test_unreachable_wandb_logs_every_point_offline_after_one_bounded_wait(tiny_dir, tmp_path):
    sweep = tmp_path / "sweep"
    env = {k: v for k, v in os.environ.items() if k != "WANDB_MODE"}
    env.update(WANDB_BASE_URL="http://127.0.0.1:9", WANDB_API_KEY="x" * 40, HYDRA_FULL_ERROR="0")
    res = subprocess.run(
        [sys.executable, "-m", "mathneuro", "-m", *base_overrides(tiny_dir, tmp_path / "cache"), "eval=none",
         "logger.mode=online", "logger.init_timeout=3", "top_k=0.05,0.1", f"hydra.sweep.dir={sweep}"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300, env=env)
    assert res.returncode == 0, res.stderr[-3000:]
    said = res.stdout + res.stderr  # Hydra's log lines go to stdout
    assert said.count("online run could not start") == 1, said[-3000:]  # one wait, one line
    assert said.count("online unavailable earlier in this process") >= 2  # the other point and the report
    points = sorted(p.parent for p in sweep.glob("*/results.json"))
    assert len(points) == 2
    for point in points:
        results = json.loads((point / "results.json").read_text())
        (run_dir,) = (point / "wandb").glob("offline-run-*")
        summary = wandb_summary(run_dir)
        assert summary["selection/num_selected"] == results["selection"]["num_selected"] > 0
        assert summary["time/total"] == results["timings"]["total"]
        config = next(r.run.config for r in wandb_records(run_dir) if r.WhichOneof("record_type") == "run")
        assert {item.key for item in config.update} >= {"top_k", "method", "point"}


def test_wandb_dir_set_by_the_user_is_honoured(tmp_path, monkeypatch):
    from mathneuro.results.recording import WandbRun

    runs = tmp_path / "wandb-runs"
    runs.mkdir()
    monkeypatch.setenv("WANDB_DIR", str(runs))
    run = WandbRun(True, project="p", mode="offline", dir=str(tmp_path / "out"), name="point")
    run.summary({"x": 1.5})
    run.finish()
    (run_dir,) = (runs / "wandb").glob("offline-run-*")
    # the run's writer (wandb-core, another process) may still be flushing its last block after
    # finish() returns in this process: read until the summary record is there, for a bounded time
    deadline = time.time() + 30
    while "x" not in wandb_summary(run_dir) and time.time() < deadline:
        time.sleep(0.2)
    assert wandb_summary(run_dir)["x"] == 1.5 and not (tmp_path / "out").exists()


# ----------------------------------------------------------------------------------------- interruption


@pytest.mark.e2e
@pytest.mark.integration
def test_sigterm_during_statistics_leaves_nothing_and_a_rerun_completes(tiny_dir, tmp_path):
    out, cache = tmp_path / "out", tmp_path / "cache"
    args = [*base_overrides(tiny_dir, cache), "num_samples=400", "batch_size=4", "progress=true", "eval=none",
            f"hydra.run.dir={out}"]
    env = {**os.environ, "WANDB_MODE": "offline", "HYDRA_FULL_ERROR": "0"}
    proc = subprocess.Popen([sys.executable, "-m", "mathneuro", *args], cwd=tmp_path, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    seen, chunks = threading.Event(), []

    def read():
        while chunk := proc.stderr.read1(4096):
            chunks.append(chunk.decode(errors="replace"))
            if "statistics [" in "".join(chunks[-3:]):
                seen.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    assert seen.wait(180), "".join(chunks)[-3000:]
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(60) == 128 + signal.SIGTERM
    reader.join(10)
    stderr = "".join(chunks)
    assert "mathneuro: interrupted by SIGTERM" in stderr and "Traceback" not in stderr
    assert not (out / "results.json").exists()
    leftovers = [p for p in (*out.rglob("*"), *cache.rglob("*")) if p.name.endswith(".tmp") or p.suffix in (
        ".safetensors",) or (p.parent.name == "statistics" and p.suffix == ".json")]
    assert leftovers == []  # no partial result, cache entry or temp file
    (run_dir,) = (out / "wandb").glob("offline-run-*")
    kinds = [r.WhichOneof("record_type") for r in wandb_records(run_dir)]
    exit_code = next(r.exit.exit_code for r in wandb_records(run_dir) if r.WhichOneof("record_type") == "exit")
    assert "preempting" in kinds and exit_code != 0  # the W&B run finished as preempted/failed
    res = cli(args, cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-3000:]
    assert json.loads((out / "results.json").read_text())["status"] == "complete"
    assert len(list((cache / "statistics").glob("*.safetensors"))) == 2
