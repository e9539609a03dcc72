"""EvalConfig: defaults, validation messages, Hydra yaml files of conf/eval, stock vs local task names."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from mathneuro.evaluation import TASKS, EvalConfig, Evaluator, kind_of, lm_eval_name, validate_config
from mathneuro.evaluation.task_table import DATA_DIR_ENV, HARNESS_TASKS, PROBE_NAMES
from mathneuro.models.tiny import tiny_model

CONF = Path(__file__).resolve().parents[1] / "conf" / "eval"


def test_defaults_are_the_papers():
    cfg = EvalConfig()
    assert cfg.name == "paper"
    assert cfg.tasks == ["gsm8k_cot", "race", "mmlu"]
    assert cfg.limit_for("gsm8k_cot") == 200 and isinstance(cfg.limit_for("gsm8k_cot"), int)
    assert cfg.limit_for("race") is None and cfg.limit_for("mmlu") is None
    assert cfg.baseline and cfg.is_enabled()
    cfg.validate()  # stock tasks, no data dir: fine before any model loads
    assert [kind_of(t) for t in cfg.tasks] == ["math", "nonmath", "nonmath"]


def test_structured_config_fields_are_hydra_friendly():
    """Primitives, optionals, lists, a task -> limit mapping and nested dataclasses, all with defaults."""
    node = OmegaConf.structured(EvalConfig)
    assert OmegaConf.to_object(node) == EvalConfig()

    def check(cls):
        for f in dataclasses.fields(cls):
            assert f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING, f.name
            if dataclasses.is_dataclass(f.default_factory() if f.default_factory is not dataclasses.MISSING else None):
                check(type(f.default_factory()))

    check(EvalConfig)
    assert EvalConfig().limits == {"gsm8k_cot": 200}


def _error(cfg: EvalConfig) -> str:
    with pytest.raises(ValueError) as info:
        cfg.validate()
    message = str(info.value)
    assert "\n" not in message
    return message


def test_validation_messages_name_key_and_allowed_values(tmp_path):
    msg = _error(EvalConfig(tasks=["gsm8k_cot", "gsm8k_cott"]))
    assert msg == "eval.tasks: unknown task 'gsm8k_cott'; did you mean gsm8k_cot?"
    assert _error(EvalConfig(tasks=["race", "race"])).startswith("eval.tasks:")
    assert _error(EvalConfig(limit=0)).startswith("eval.limit:")
    assert _error(EvalConfig(limits={"race": -1})).startswith("eval.limits.race:")
    assert _error(EvalConfig(limits={"arc_easy": "ten"})).startswith("eval.limits.arc_easy:")
    assert _error(EvalConfig(batch_size=0)).startswith("eval.batch_size:")
    assert _error(EvalConfig(num_fewshot=-1)).startswith("eval.num_fewshot:")
    assert _error(EvalConfig(math_tasks=["race"], nonmath_tasks=["race"])).startswith("eval.math_tasks:")
    bad = EvalConfig(tasks=["arith"])
    bad.arith.operations = ["/"]
    assert _error(bad) == "eval.arith.operations: unknown operation '/'; allowed: +, -, *"
    bad = EvalConfig(tasks=["arith"])
    bad.arith.digits = 0
    assert _error(bad).startswith("eval.arith.digits:")
    bad = EvalConfig(tasks=["mc"])
    bad.mc.file = str(tmp_path / "missing.jsonl")
    assert _error(bad).startswith("eval.mc.file: no such file")
    assert _error(EvalConfig(data_dir=str(tmp_path / "nowhere"))).startswith("eval.data_dir: no such directory")
    # EGSM exists only locally; an empty data dir lacks the files of the requested tasks.
    assert "no stock lm-eval task" in _error(EvalConfig(tasks=["egsm"]))
    assert _error(EvalConfig(tasks=["gsm8k_cot"], data_dir=str(tmp_path))).startswith(
        "eval.data_dir: task 'gsm8k_cot' needs gsm8k/test.jsonl")


def test_data_dir_switches_to_local_tasks(data_dir, monkeypatch):
    for task in HARNESS_TASKS:
        spec = TASKS[task]
        assert lm_eval_name(task, data_dir) == spec.local
        if spec.stock:
            assert lm_eval_name(task, None) == spec.stock
    assert lm_eval_name("egsm", data_dir) == "egsm_local"
    with pytest.raises(ValueError):
        lm_eval_name("egsm", None)
    EvalConfig(tasks=list(HARNESS_TASKS), data_dir=str(data_dir)).validate()
    monkeypatch.setenv(DATA_DIR_ENV, str(data_dir))
    cfg = EvalConfig(tasks=["gsm8k_cot", "egsm"])
    assert cfg.resolved_data_dir() == data_dir.resolve()
    cfg.validate()


def test_conf_eval_yaml_files_compose_and_validate(data_dir):
    names = sorted(p.stem for p in CONF.glob("*.yaml"))
    assert {"paper", "quick", "none", "generalisation", "probes"} <= set(names)
    for name in names:
        merged = OmegaConf.merge(OmegaConf.structured(EvalConfig), OmegaConf.load(CONF / f"{name}.yaml"))
        cfg = OmegaConf.to_object(merged)
        assert cfg.name == name
        cfg.data_dir = str(data_dir)  # stock minerva_math would need math_verify; local twins do not
        cfg.validate()
        # a Hydra-style override of the data dir is all it takes to go local
        with_dir = OmegaConf.merge(merged, OmegaConf.from_dotlist([f"data_dir={data_dir}"]))
        assert Path(OmegaConf.to_object(with_dir).resolved_data_dir()) == data_dir.resolve()
    paper = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(EvalConfig), OmegaConf.load(CONF / "paper.yaml")))
    assert paper == EvalConfig()
    quick = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(EvalConfig), OmegaConf.load(CONF / "quick.yaml")))
    assert set(quick.tasks) <= set(PROBE_NAMES)
    none = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(EvalConfig), OmegaConf.load(CONF / "none.yaml")))
    assert not none.is_enabled()


def test_fingerprint_tracks_what_decides_scores(data_dir):
    a, b = EvalConfig(), EvalConfig(name="renamed", progress=False)
    assert a.fingerprint() == b.fingerprint()
    assert a.fingerprint() != EvalConfig(limit=10).fingerprint()
    assert a.fingerprint() != EvalConfig(data_dir=str(data_dir)).fingerprint()
    with pytest.raises(ValueError, match="eval.batch_size"):
        validate_config(OmegaConf.create({"batch_size": 0}))


def test_evaluator_accepts_mappings_and_none_is_disabled():
    model, tok = tiny_model("llama")
    ev = Evaluator(model, tok, {"name": "none", "tasks": [], "baseline": False})
    assert not ev.enabled
    assert ev.evaluate() == {}
    assert ev._harness is None  # nothing of lm-eval was built
    with pytest.raises(ValueError, match="eval.tasks: unknown task 'bogus'"):
        Evaluator(model, tok, OmegaConf.create({"tasks": ["bogus"]}))
    ev = Evaluator(model, tok, EvalConfig(tasks=["race"], math_tasks=["race"]))
    assert ev.kind("race") == "math" and ev.kind("mmlu") == "nonmath"
