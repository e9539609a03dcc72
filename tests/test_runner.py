"""The Hydra runner end to end on a tiny model: results, W&B offline runs, sweeps, resume, bad input."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from mathneuro.cli.run import config_dir, job_dirname
from mathneuro.methods.selection import Selection
from mathneuro.pipeline.config import ConfigError, register_configs, validate
from mathneuro.pipeline.runner import run_point

pytestmark = pytest.mark.integration  # real files, subprocesses or lm-eval: see Makefile test tiers

CONF = Path(config_dir())



def base_overrides(tiny_dir: Path, cache: Path) -> list[str]:
    return [f"model.name_or_path={tiny_dir}", "model.name=tiny", "model.dtype=float32", "model.device=cpu",
            f"cache_dir={cache}", "num_samples=6", "batch_size=4", "max_length=64", "progress=false"]


def cli(args: list[str], cwd: Path, timeout: int = 240, env: dict | None = None) -> subprocess.CompletedProcess:
    full_env = {**os.environ, "WANDB_MODE": "offline", "HYDRA_FULL_ERROR": "0", **(env or {})}
    return subprocess.run([sys.executable, "-m", "mathneuro", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env=full_env)


def compose_cfg(overrides: list[str]):
    register_configs()
    if not OmegaConf.has_resolver("mathneuro_dirname"):
        OmegaConf.register_new_resolver("mathneuro_dirname", job_dirname)
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose(config_name="config", overrides=overrides)


def options(group: str) -> list[str]:
    return sorted(p.stem for p in (CONF / group).glob("*.yaml"))


@pytest.mark.parametrize("group", ["model", "task", "filter", "method", "intervention", "eval", "logger",
                                   "experiment", "hparams_search", "hydra/launcher"])
def test_every_config_composes_and_validates(group, tmp_path, monkeypatch):
    from tests.sample_data import write_sample_data

    write_sample_data(tmp_path / "data")  # offline experiments read local copies laid out like ../shared/data
    monkeypatch.setenv("MATHNEURO_DATA_DIR", str(tmp_path / "data"))
    assert options(group), f"conf/{group} is empty"
    for name in options(group):
        cfg = compose_cfg([f"{group}={name}"])
        if not group.startswith("hydra"):
            obj = OmegaConf.to_object(cfg)  # type-checks against the structured config
            from mathneuro.pipeline.config import validate

            try:
                validate(obj)
            except ConfigError as exc:
                # an optional extra of lm-eval that conflicts with Hydra's antlr4 pin may be absent
                if "needs python module" not in str(exc):
                    raise


def test_one_progress_switch_covers_evaluation():
    assert OmegaConf.to_object(compose_cfg(["progress=false", "eval=probes"])).eval.progress is False
    assert OmegaConf.to_object(compose_cfg(["eval=paper"])).eval.progress is True
    assert OmegaConf.to_object(compose_cfg(["progress=false", "eval.progress=true"])).eval.progress is True


@pytest.mark.e2e
def test_end_to_end_run_writes_complete_results_and_offline_wandb(tiny_dir, tmp_path):
    out = tmp_path / "run"
    res = cli([*base_overrides(tiny_dir, tmp_path / "cache"), "eval=quick", "eval.limit=4",
               "save_selection=true", f"hydra.run.dir={out}"], cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-3000:]
    results = json.loads((out / "results.json").read_text())
    assert results["status"] == "complete"
    assert results["point"]["method"] == "mathneuro" and results["point"]["model"] == "tiny"
    sel = results["selection"]
    assert 0 < sel["num_selected"] < sel["num_scored"] < sel["num_parameters"]
    assert sum(sel["per_layer"].values()) == sel["num_selected"]
    assert results["metrics"] and set(results["metrics"]) == set(results["baseline_metrics"])
    assert all(k.split("/")[0] in ("math", "nonmath") for k in results["metrics"])
    assert {"load_model", "identification", "evaluation", "total"} <= set(results["timings"])
    peaks = [results["peak_memory"][k]["rss_mb"] for k in ("load_model", "identification", "evaluation")]
    assert peaks == sorted(peaks) and peaks[0] > 50  # a running maximum, in MB, of a real process
    assert results["config"]["top_k"] == 0.05 and results["versions"]["torch"]
    hw = results["hardware"]  # what the timings and float scores depend on
    assert hw["device"] == "cpu" and hw["dtype"] == "float32" and hw["threads"] >= 1 and hw["device_name"]
    assert (out / "selection.safetensors").exists()
    runs = list((out / "wandb").glob("offline-run-*"))
    assert len(runs) == 1
    assert not list(out.glob(".results.json.*"))  # no temp file left behind


@pytest.mark.e2e
def test_two_by_two_multirun_computes_statistics_once_per_dataset(tiny_dir, tmp_path):
    sweep = tmp_path / "sweep"
    cache = tmp_path / "cache"
    res = cli(["-m", *base_overrides(tiny_dir, cache), "eval=none", "top_k=0.05,0.1",
               "method=mathneuro,random", f"hydra.sweep.dir={sweep}"], cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-3000:]
    results = sorted(sweep.glob("*/results.json"))
    assert len(results) == 4
    points = {(json.loads(p.read_text())["point"]["method"], json.loads(p.read_text())["point"]["top_k"])
              for p in results}
    assert points == {("mathneuro", 0.05), ("mathneuro", 0.1), ("random", 0.05), ("random", 0.1)}
    assert len(list((cache / "statistics").glob("*.safetensors"))) == 2  # task + filter, once each
    assert len([p for p in sweep.glob("*/wandb/offline-run-*") if p.parent.parent.name != "report"]) == 4
    groups = {json.loads(p.read_text())["point"]["method"] for p in results}
    assert groups == {"mathneuro", "random"}
    # the sweep's report is written when the multirun ends, and logged as one more offline W&B run
    assert (sweep / "report" / "points.csv").read_text().count("\n") == 5  # header + 4 points
    assert list((sweep / "report" / "wandb").glob("offline-run-*"))


@pytest.mark.e2e
def test_interrupted_multirun_resumes_without_redoing_points(tiny_dir, tmp_path):
    sweep = tmp_path / "sweep"
    args = ["-m", *base_overrides(tiny_dir, tmp_path / "cache"), "eval=quick", "eval.limit=2",
            "logger=none", "top_k=0.02,0.05,0.1", f"hydra.sweep.dir={sweep}"]
    env = {**os.environ, "WANDB_MODE": "offline"}
    proc = subprocess.Popen([sys.executable, "-m", "mathneuro", *args], cwd=tmp_path, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.time() + 240
    while time.time() < deadline and not list(sweep.glob("*/results.json")):
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGKILL)  # the interruption: no chance to clean up
    proc.wait()
    first = {p: p.stat().st_mtime_ns for p in sweep.glob("*/results.json")}
    assert 1 <= len(first) < 3
    for p in first:
        assert json.loads(p.read_text())["status"] == "complete"
    res = cli(args, cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-3000:]
    final = sorted(sweep.glob("*/results.json"))
    assert len(final) == 3
    assert all(json.loads(p.read_text())["status"] == "complete" for p in final)
    for p, mtime in first.items():
        assert p.stat().st_mtime_ns == mtime  # not done twice
    assert res.stdout.count("already complete, skipped") == len(first)


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("top_k=0", "top_k"),
        ("top_k=1.5", "top_k"),
        ("num_samples=0", "num_samples"),
        ("intervention=scale intervention.scalar=nan", "intervention.scalar"),
        ("intervention=finetune intervention.steps=0", "intervention.steps"),
        ("intervention=finetune intervention.optimizer=lion", "intervention.optimizer: unknown value 'lion'"),
        ("intervention=mean_ablate", "intervention.name: intervention 'mean_ablate' edits neurons selections; "
                                     "method 'mathneuro' selects weights"),
        ("intervention=prune intervention.steps=3", "intervention.steps: not a setting of intervention 'prune'"),
        ("intervention=mean_ablate method=lape export_model=true", "export_model: intervention 'mean_ablate'"),
        ("task.path=/nonexistent/file.jsonl", "task.path"),
        ("task.template='{nosuchfield}'", "task.template"),
        ("method.name=nope", "method.name"),
        ("method=lape method.share=neurons", r"method\.share: unknown value 'neurons'; allowed: all, candidates"),
        ("eval.tasks=[no_such_task]", "eval.tasks"),
        ("model.dtype=int3", "model.dtype"),
    ],
)
def test_bad_values_are_refused_before_the_model_loads(tiny_dir, tmp_path, override, message):
    cfg = compose_cfg([*base_overrides(tmp_path / "no-model-here", tmp_path / "cache"), *override.split()])
    with pytest.raises(ConfigError, match=message):
        # the model path does not exist: reaching the model load would raise something else
        run_point(OmegaConf.to_object(cfg), tmp_path / "out")


def test_empty_dataset_is_refused(tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    cfg = compose_cfg([*base_overrides(tmp_path / "no-model", tmp_path / "cache"), f"filter.path={empty}"])
    with pytest.raises((ConfigError, ValueError), match="filter.path"):
        run_point(OmegaConf.to_object(cfg), tmp_path / "out")


@pytest.mark.e2e
def test_cli_bad_input_exits_nonzero_with_one_clear_line(tiny_dir, tmp_path):
    res = cli([*base_overrides(tiny_dir, tmp_path / "cache"), "top_k=2", f"hydra.run.dir={tmp_path / 'o'}"],
              cwd=tmp_path)
    assert res.returncode == 2
    assert res.stderr.strip().splitlines()[-1].startswith("mathneuro: error: top_k:")
    res = cli([*base_overrides(tiny_dir, tmp_path / "cache"), "method=nope"], cwd=tmp_path)
    assert res.returncode != 0 and "method" in res.stderr and "mathneuro" in res.stderr  # lists the options


def test_unwritable_output_dir_is_refused(tiny_dir, tmp_path):
    cfg = compose_cfg(base_overrides(tiny_dir, tmp_path / "cache"))
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(ValueError, match="hydra.run.dir: cannot write to directory"):
        run_point(OmegaConf.to_object(cfg), blocker / "out")


def test_lape_on_a_model_without_an_understood_mlp_is_refused(tmp_path):
    from transformers import GPT2Config, GPT2LMHeadModel

    from mathneuro.models.tiny import byte_tokenizer

    path = tmp_path / "gpt2"
    tok = byte_tokenizer()
    GPT2LMHeadModel(GPT2Config(vocab_size=len(tok), n_embd=16, n_layer=1, n_head=2)).save_pretrained(path)
    tok.save_pretrained(path)
    cfg = compose_cfg([*base_overrides(path, tmp_path / "cache"), "method=lape", "eval=none", "logger=none"])
    with pytest.raises(ConfigError, match="lape"):
        run_point(OmegaConf.to_object(cfg), tmp_path / "out")


def test_lape_results_name_the_rule_and_report_saturation(tiny_dir, tmp_path, caplog):
    base = [*base_overrides(tiny_dir, tmp_path / "cache"), "method=lape", "eval=none", "logger=none"]
    cfg = OmegaConf.to_object(compose_cfg([*base, "top_k=1.0"]))
    with caplog.at_level(logging.WARNING, logger="mathneuro"):
        res = run_point(cfg, tmp_path / "all")
    lape = res["selection"]["lape"]
    assert res["point"]["share"] == "all" and lape["share"] == "all"
    assert lape["num_kept"] == lape["num_neurons"] > lape["num_candidates"] > 0  # round(1.0 · all neurons)
    assert lape["saturated"] is True and 0 < lape["saturation_top_k"] < 1
    assert res["selection"]["num_selected"] <= lape["num_candidates"]
    saturation = [r.getMessage() for r in caplog.records if "selects nothing new" in r.getMessage()]
    assert len(saturation) == 1 and f"all {lape['num_candidates']:,} candidate neurons" in saturation[0]
    on_disk = json.loads((tmp_path / "all" / "results.json").read_text())
    assert on_disk["selection"]["lape"]["saturated"] is True
    caplog.clear()
    cfg = OmegaConf.to_object(compose_cfg([*base, "top_k=0.5", "method.share=candidates"]))
    with caplog.at_level(logging.WARNING, logger="mathneuro"):
        res = run_point(cfg, tmp_path / "candidates")
    lape = res["selection"]["lape"]
    assert res["point"]["share"] == "candidates"
    assert lape["num_kept"] == int(0.5 * lape["num_candidates"]) and lape["saturated"] is False
    assert not [r for r in caplog.records if "selects nothing new" in r.getMessage()]


def test_random_neurons_zero_as_many_neurons_per_layer_as_lape(tiny_dir, tmp_path):
    base = [*base_overrides(tiny_dir, tmp_path / "cache"), "eval=none", "logger=none", "top_k=0.5",
            "save_selection=true"]
    lape = run_point(OmegaConf.to_object(compose_cfg([*base, "method=lape"])), tmp_path / "lape")
    rand = run_point(OmegaConf.to_object(compose_cfg([*base, "method=random_neurons"])), tmp_path / "rand")
    assert rand["selection"]["num_selected"] == lape["selection"]["num_selected"] > 0
    assert rand["selection"]["per_layer"] == lape["selection"]["per_layer"]
    assert rand["point"]["share"] == "all"
    assert rand["selection"]["lape"]["num_kept"] == lape["selection"]["lape"]["num_kept"]
    hidden = 32  # the tiny model's hidden size: one neuron feeds one column of its down_proj
    for res in (lape, rand):
        assert res["selection"]["num_weights_edited"] == res["selection"]["num_selected"] * hidden
        assert res["selection"]["fraction_of_model_edited"] == pytest.approx(
            res["selection"]["num_weights_edited"] / res["selection"]["num_parameters"])
    chosen = {p.name: Selection.load(p / "selection.safetensors").neurons
              for p in (tmp_path / "lape", tmp_path / "rand")}
    assert any(not torch.equal(chosen["lape"][m], chosen["rand"][m]) for m in chosen["lape"])


def test_resume_reads_a_setting_missing_from_the_record_as_its_default(tiny_dir, tmp_path):
    base = [*base_overrides(tiny_dir, tmp_path / "cache"), "eval=none", "logger=none", "top_k=0.5"]
    cfg = OmegaConf.to_object(compose_cfg([*base, "method=lape"]))
    out = tmp_path / "lape"
    run_point(cfg, out)
    old = json.loads((out / "results.json").read_text())
    old["config"]["method"].pop("share", None)
    (out / "results.json").write_text(json.dumps(old))
    assert run_point(cfg, out).get("skipped")  # share's default (all) is what ran
    old["config"]["method"]["share"] = "candidates"
    (out / "results.json").write_text(json.dumps(old))
    again = run_point(cfg, out)
    assert not again.get("skipped") and again["selection"]["lape"]["share"] == "all"


def test_experiment_values_win_over_the_primary_config():
    assert compose_cfg([]).num_samples == 200  # the embedded demo
    cfg = compose_cfg(["experiment=pruning_sweep"])
    assert cfg.num_samples == 500 and cfg.task.name == "gsm8k" and cfg.filter.name == "race"
    cfg = compose_cfg(["experiment=offline_shared"])
    assert cfg.task.path.endswith("gsm8k/train.jsonl") and cfg.eval.data_dir


def test_job_dirname_is_stable_readable_and_distinct():
    a = job_dirname("method=wanda,model.name_or_path=/models/a,top_k=0.01")
    b = job_dirname("method=wanda,model.name_or_path=/models/b,top_k=0.01")
    assert a == job_dirname("method=wanda,model.name_or_path=/models/a,top_k=0.01")
    assert a != b and "/" not in a and a.startswith("method=wanda,top_k=0.01-")
    assert job_dirname("method=wanda,top_k=0.01") == "method=wanda,top_k=0.01"
    assert len(job_dirname(",".join(f"key{i}=value{i}" for i in range(60)))) <= 200
    # Hydra escapes the ':' of an import path; the name shows the user's plugin as written
    assert (job_dirname(r"intervention.name=my_interventions\:shuffle,method=random")
            == "intervention.name=my_interventions:shuffle,method=random")


def test_a_point_running_in_another_process_is_skipped_not_repeated(tiny_dir, tmp_path):
    from mathneuro.pipeline.runner import RUNNING_LOCK
    from mathneuro.util.locking import FileLock

    cfg = OmegaConf.to_object(compose_cfg([*base_overrides(tiny_dir, tmp_path / "cache"), "eval=none",
                                           "logger=none", "top_k=0.5"]))
    out = tmp_path / "point"
    out.mkdir()
    held = FileLock(out / RUNNING_LOCK).acquire()  # another worker holds the point
    try:
        res = run_point(cfg, out)
    finally:
        held.release()
    assert res["skipped"] and res["running_elsewhere"]["pid"] == os.getpid()
    assert not (out / "results.json").exists()

    # a claim left by a killed worker (no heartbeat for longer than the stale limit) is taken over
    (out / RUNNING_LOCK).write_text(json.dumps({"host": "gone", "pid": 1, "token": "dead"}))
    old = time.time() - 3600
    os.utime(out / RUNNING_LOCK, (old, old))
    res = run_point(cfg, out)
    assert not res.get("skipped") and json.loads((out / "results.json").read_text())["status"] == "complete"
    assert not (out / RUNNING_LOCK).exists()  # released when the point is done

    # a fresh claim (heartbeat seconds ago) by a worker on this host that was since killed: the
    # resumed sweep runs the point now instead of skipping it as "running elsewhere"
    (out / "results.json").unlink()
    code = ("import os; from mathneuro.util.locking import FileLock; "
            f"FileLock({str(out / RUNNING_LOCK)!r}).acquire(); os._exit(0)")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
    assert (out / RUNNING_LOCK).exists()
    res = run_point(cfg, out)
    assert not res.get("skipped") and json.loads((out / "results.json").read_text())["status"] == "complete"


def test_wanda_spends_no_forward_pass_on_the_filter_set(tiny_dir, tmp_path):
    """Wanda scores the task set alone: with a filter configured, only the task's statistics are
    computed (a sweep with mathneuro then computes the filter's once, for the methods that use it)."""
    cache = tmp_path / "cache"
    cfg = OmegaConf.to_object(compose_cfg([*base_overrides(tiny_dir, cache), "eval=none", "logger=none",
                                           "method=wanda", "top_k=0.1"]))
    res = run_point(cfg, tmp_path / "wanda")
    assert res["status"] == "complete" and len(res["statistics_keys"]) == 1
    assert len(list((cache / "statistics").glob("*.safetensors"))) == 1  # the task set's only
    cfg.method = OmegaConf.to_object(compose_cfg(["method=mathneuro"])).method
    res = run_point(cfg, tmp_path / "mathneuro")
    assert len(res["statistics_keys"]) == 2  # task (from the cache) + filter
    assert len(list((cache / "statistics").glob("*.safetensors"))) == 2


def test_random_sized_by_wanda_matches_its_counts_per_matrix_without_a_filter_pass(tiny_dir, tmp_path):
    """method.reference=wanda: as many weights in every matrix as Wanda prunes there, other weights,
    no forward pass over the filter set; the point says whose size it has, and a random point sized
    by MathNeuro in the same folder is not taken for it on resume."""
    cache = tmp_path / "cache"
    base = [*base_overrides(tiny_dir, cache), "eval=none", "logger=none", "top_k=0.1", "save_selection=true"]
    wanda = run_point(OmegaConf.to_object(compose_cfg([*base, "method=wanda"])), tmp_path / "wanda")
    cfg = OmegaConf.to_object(compose_cfg([*base, "method=random", "method.reference=wanda"]))
    rand = run_point(cfg, tmp_path / "rand")
    assert rand["point"]["reference"] == "wanda" and len(rand["statistics_keys"]) == 1  # the task set's only
    assert rand["selection"]["per_module"] == wanda["selection"]["per_module"]
    assert rand["selection"]["num_weights_edited"] == wanda["selection"]["num_weights_edited"] > 0
    chosen = {d: Selection.load(tmp_path / d / "selection.safetensors").masks for d in ("wanda", "rand")}
    assert all(int(m.sum()) == int(chosen["rand"][n].sum()) for n, m in chosen["wanda"].items())
    assert any(not torch.equal(m, chosen["rand"][n]) for n, m in chosen["wanda"].items())

    plain = OmegaConf.to_object(compose_cfg([*base, "method=random"]))
    mathneuro_sized = run_point(plain, tmp_path / "plain")
    assert "reference" not in mathneuro_sized["point"] and len(mathneuro_sized["statistics_keys"]) == 2
    assert mathneuro_sized["selection"]["num_selected"] < rand["selection"]["num_selected"]
    again = run_point(cfg, tmp_path / "plain")  # same folder, other reference: recomputed, not skipped
    assert not again.get("skipped") and again["point"]["reference"] == "wanda"
    assert run_point(cfg, tmp_path / "plain").get("skipped")


@pytest.mark.parametrize(("method", "reference", "why", "allowed"), [
    ("random", "lape", "selects neurons, not weights; its reference is random_neurons", "mathneuro, wanda, wanda_row"),
    ("random", "random", "is itself a random reference", "mathneuro, wanda, wanda_row"),
    ("random", "wandaa", "unknown method", "mathneuro, wanda, wanda_row"),
    ("random_neurons", "mathneuro", "selects weights, not neurons; its reference is random", "lape"),
    ("random_neurons", "random_neurons", "is itself a random reference", "lape")])
def test_a_random_reference_refuses_a_method_it_cannot_be_sized_by(method, reference, why, allowed):
    with pytest.raises(ConfigError, match=rf"method\.reference: .*{why}.*allowed: (.*, )?{allowed}"):
        validate(compose_cfg([f"method={method}", f"method.reference={reference}"]))


@pytest.mark.parametrize(("overrides", "message"), [
    (["objective.metric=math/arith/exact_match"], None),  # a probe: its side and task are checked
    (["objective.metric='math/gsm8k_cot/exact_match,strict-match'", "eval.tasks=[gsm8k_cot,mc]",
      "objective.constraint=nonmath/mc/acc"], None),
    (["objective.metric=nonmath/mmlu_anatomy/acc", "eval.tasks=[mmlu]"], None),  # a subtask of a group
    (["objective.metric=math/gsm8k_cot/exact_match", "eval.tasks=[gsm8k_cot]"],
     r"objective\.metric: 'gsm8k_cot' reports no metric 'exact_match'; it reports: exact_match,flexible-extract, "
     r"exact_match,strict-match$"),
    (["objective.metric=nonmath/hellaswag/acc_norm", "objective.constraint=nonmath/mmlu/acc",
      "eval.tasks=[hellaswag]"], r"objective\.constraint: task 'mmlu' is not evaluated; eval\.tasks: hellaswag$"),
    (["objective.metric='nonmath/gsm8k_cot/exact_match,strict-match'", "eval.tasks=[gsm8k_cot]"],
     r"objective\.metric: 'gsm8k_cot' counts as math in this run: math/gsm8k_cot/exact_match,strict-match$"),
    (["objective.metric=math/arith/exact_match", "eval.nonmath_tasks=[arith]"], r"counts as nonmath in this run"),
    (["objective.metric=arith_exact_match"], r"objective\.metric: 'arith_exact_match' is not <side>/<task>/<metric>"),
    (["objective.metric=math/arith/exact_match", "eval=none"], r"objective\.metric: .* eval=none evaluates nothing"),
    (["objective.tolerance=-0.1"], r"objective\.tolerance: must be >= 0"),
])
def test_the_objectives_metrics_are_ones_the_run_reports(overrides, message, tmp_path):
    """A misnamed objective metric would make every trial's objective NaN (a misnamed constraint: no penalty,
    silently); both fail before any model loads, naming the key and what the task reports."""
    from tests.sample_data import write_sample_data

    write_sample_data(tmp_path / "data")
    cfg = OmegaConf.to_object(compose_cfg(["eval=quick", f"eval.data_dir={tmp_path / 'data'}", *overrides]))
    if message is None:
        validate(cfg)
    else:
        with pytest.raises(ConfigError, match=message):
            validate(cfg)


def _finish_baseline_elsewhere(bench, key: str, lock, metrics: dict, delay: float):
    """Another process's baseline evaluation: after ``delay`` s it stores ``metrics`` and releases ``lock``."""
    import threading

    def finish() -> None:
        time.sleep(delay)
        path = bench.cache.root / "baselines" / f"{key}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"metrics": metrics, "model": json.loads(json.dumps(bench.identity, default=str)),
                                    "eval": {}}))
        lock.release()

    thread = threading.Thread(target=finish)
    thread.start()
    return thread


def test_processes_sharing_a_cache_evaluate_the_baseline_once(tiny_dir, tmp_path):

    from mathneuro.pipeline.workbench import get_workbench

    cfg = OmegaConf.to_object(compose_cfg([*base_overrides(tiny_dir, tmp_path / "cache"), "eval=quick",
                                           "eval.limit=2", "logger=none"]))
    bench = get_workbench(cfg)
    key = bench.baseline_key(cfg.eval)
    lock = bench.cache.lock(f"baseline-{key}").acquire()  # another process is evaluating the baseline
    planted = {"math/arith/exact_match": 0.123456}  # a value no evaluation of 2 problems can give

    thread = _finish_baseline_elsewhere(bench, key, lock, planted, delay=1.0)
    try:
        assert bench.baseline(cfg.eval) == planted  # waited for it and read its result: not evaluated again
    finally:
        thread.join()


def test_a_point_evaluates_its_edit_first_while_another_process_evaluates_the_baseline(tiny_dir, tmp_path):
    """A worker that finds the unedited model being evaluated elsewhere does not sit idle on the lock:
    it evaluates its edit, then reads the other process's baseline."""

    from mathneuro.pipeline.workbench import get_workbench

    cfg = OmegaConf.to_object(compose_cfg([*base_overrides(tiny_dir, tmp_path / "cache"), "eval=quick",
                                           "eval.limit=2", "logger=none", "top_k=0.2"]))
    bench = get_workbench(cfg)
    key = bench.baseline_key(cfg.eval)
    lock = bench.cache.lock(f"baseline-{key}").acquire()  # another process is evaluating the baseline
    planted = {"math/arith/exact_match": 0.123456, "nonmath/mc/acc": 0.654321}

    # the other process finishes only once this point has evaluated its edit (whatever the machine's speed)
    evaluator = bench.evaluator(cfg.eval)
    evaluate, finished = evaluator.evaluate, []

    def evaluate_then_let_the_other_finish(*args, **kwargs):
        metrics = evaluate(*args, **kwargs)
        if not finished:
            finished.append(_finish_baseline_elsewhere(bench, key, lock, planted, delay=0.5))
        return metrics

    evaluator.evaluate = evaluate_then_let_the_other_finish
    try:
        res = run_point(cfg, tmp_path / "point")
    finally:
        del evaluator.evaluate
        for thread in finished:
            thread.join()
        if not finished:
            lock.release()
    assert res["status"] == "complete" and res["baseline_metrics"] == planted  # read, not evaluated again
    order = list(res["timings"])
    assert order.index("evaluation") < order.index("baseline_evaluation")
    assert {"math/arith/exact_match", "nonmath/mc/acc"} <= set(res["metrics"])  # the edit was evaluated


def test_a_points_record_names_the_machine_its_unedited_metrics_came_from(tiny_dir, tmp_path, caplog):
    """Paired differences are edited minus unedited; when the unedited metrics come from a cache another kind
    of machine wrote (a shared cache_dir), results.json names that machine and the point warns."""
    import logging

    from mathneuro.models.devices import machine_kind
    from mathneuro.pipeline.workbench import get_workbench

    cfg = OmegaConf.to_object(compose_cfg([*base_overrides(tiny_dir, tmp_path / "cache"), "eval=quick",
                                           "eval.limit=2", "logger=none", "top_k=0.2"]))
    res = run_point(cfg, tmp_path / "here")
    assert res["baseline_hardware"] == res["hardware"]  # evaluated by this point
    assert res["baseline_provenance"] == {k: res["provenance"][k] for k in ("version", "git", "packages")}
    bench = get_workbench(cfg)
    path = bench.cache.root / "baselines" / f"{bench.baseline_key(cfg.eval)}.json"
    data = json.loads(path.read_text())
    assert data["hardware"] == res["hardware"]
    other = {"device": "cpu", "dtype": "float32", "device_name": "Other CPU", "cpu_flags": ["avx2"]}
    path.write_text(json.dumps({**data, "hardware": other}))  # written by a worker on another machine
    bench.baselines.clear()  # a fresh process: the baseline is read from the cache
    with caplog.at_level(logging.WARNING, logger="mathneuro"):
        again = run_point(cfg, tmp_path / "there")
    assert again["baseline_hardware"] == other and again["baseline_metrics"] == res["baseline_metrics"]
    assert f"computed on {machine_kind(other)} (read from the cache)" in caplog.text
    path.write_text(json.dumps({k: v for k, v in data.items() if k != "hardware"}))  # an entry from before
    bench.baselines.clear()
    older = run_point(cfg, tmp_path / "older")
    assert "baseline_hardware" not in older and "baseline_provenance" in older  # only what the entry records


@pytest.mark.e2e
def test_two_workers_on_one_sweep_run_every_point_once(tiny_dir, tmp_path):
    sweep = tmp_path / "sweep"
    args = ["-m", *base_overrides(tiny_dir, tmp_path / "cache"), "eval=none", "logger=none",
            "top_k=0.02,0.05,0.1,0.2", f"hydra.sweep.dir={sweep}"]
    env = {**os.environ, "WANDB_MODE": "offline", "HYDRA_FULL_ERROR": "0"}
    workers = [subprocess.Popen([sys.executable, "-m", "mathneuro", *args], cwd=tmp_path, env=env, text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE) for _ in range(2)]
    outputs = [w.communicate(timeout=300) for w in workers]
    assert all(w.returncode == 0 for w in workers), [err[-2000:] for _, err in outputs]
    stdout = "".join(out for out, _ in outputs)
    results = sorted(sweep.glob("*/results.json"))
    assert len(results) == 4 and all(json.loads(p.read_text())["status"] == "complete" for p in results)
    for p in results:  # each point was run by exactly one worker; the other skipped it
        assert stdout.count(f"results: {p}") == 1
    assert stdout.count("already complete, skipped") + stdout.count("), skipped") == 4
    assert not list(sweep.glob("*/.running.lock"))
