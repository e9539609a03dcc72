"""lm-evaluation-harness offline: every shipped local task YAML loads and builds its prompts from
small fixture files; lm-eval runs with ``limit`` on a tiny model return the expected metric keys."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import torch
import yaml

from mathneuro.eval_tasks import TASKS_DIR
from mathneuro.eval_tasks.fewshot import gsm8k_cot, minerva_math
from mathneuro.evaluation import TASKS, EvalConfig, Evaluator, flatten_lm_eval_metrics
from mathneuro.evaluation.task_table import HARNESS_TASKS, MMLU_SUBJECTS, missing_files
from mathneuro.models.tiny import tiny_model

pytestmark = pytest.mark.integration  # real files, subprocesses or lm-eval: see Makefile test tiers

SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"


@pytest.fixture(scope="module")
def task_manager(data_dir):
    from lm_eval.tasks import TaskManager

    return TaskManager(include_path=str(TASKS_DIR), include_defaults=False, metadata={"data_dir": str(data_dir)})


def _shipped_yaml_names() -> tuple[set[str], set[str]]:
    class Loader(yaml.SafeLoader):
        pass

    Loader.add_constructor("!function", lambda loader, node: loader.construct_scalar(node))
    tasks, groups = set(), set()
    for path in TASKS_DIR.glob("**/*.yaml"):
        cfg = yaml.load(path.read_text(), Loader=Loader)
        if "group" in cfg:
            groups.add(cfg["group"])
        elif "task" in cfg:
            tasks.add(cfg["task"])
        else:
            assert path.name.startswith("_"), f"{path}: neither task nor group, and not a _template"
    return tasks, groups


def test_shipped_yamls_match_the_task_table(task_manager, data_dir):
    tasks, groups = _shipped_yaml_names()
    assert {f"mmlu_local_{s}" for s in MMLU_SUBJECTS} <= tasks
    locals_ = {TASKS[t].local for t in HARNESS_TASKS}
    assert locals_ <= tasks | groups
    assert (tasks | groups) - locals_ <= {f"mmlu_local_{s}" for s in MMLU_SUBJECTS} | {
        t for t in tasks if t.startswith("minerva_math_local_")}
    assert set(task_manager.all_subtasks) == tasks
    for task in HARNESS_TASKS:  # the sample data holds every file the table says a local task reads
        assert missing_files(task, data_dir) == []


def _all_leaf_tasks(task_manager):
    tasks, _ = _shipped_yaml_names()
    return sorted(tasks)


def test_every_local_task_loads_and_builds_fewshot_prompts(task_manager):
    for name in _all_leaf_tasks(task_manager):
        task = task_manager.load([name])["tasks"][name]
        task.set_fewshot_seed(1234)
        docs = list(task.eval_docs)
        assert docs, name
        shots = task.get_config("num_fewshot") or (2 if task.has_training_docs() or name.startswith("mmlu") else 0)
        context = task.fewshot_context(docs[0], num_fewshot=shots)
        if task.OUTPUT_TYPE == "multiple_choice":
            choices = task.doc_to_choice(docs[0])
            target = task.doc_to_target(docs[0])
            assert isinstance(choices, list) and len(choices) >= 2, name
            if isinstance(context, list):  # winogrande: one context per choice
                assert len(context) == len(choices)
            else:
                assert 0 <= int(target) < len(choices), name
        else:
            assert isinstance(context, str), name
            assert context or task.OUTPUT_TYPE == "loglikelihood_rolling", name
        requests = task.construct_requests(docs[0], context, metadata=(name, 0, 1))
        assert requests, name


def _context(task_manager, name: str, num_fewshot: int | None = None, doc: int = 0):
    task = task_manager.load([name])["tasks"][name]
    task.set_fewshot_seed(1234)
    shots = task.get_config("num_fewshot") if num_fewshot is None else num_fewshot
    d = list(task.eval_docs)[doc]
    return task, d, task.fewshot_context(d, num_fewshot=shots or 0)


def test_local_prompts_have_the_stock_formats(task_manager, data_dir):
    task, doc, ctx = _context(task_manager, "gsm8k_cot_local")
    shots = gsm8k_cot()
    assert len(shots) == 8 and ctx.startswith(f"Q: {shots[0]['question']}\nA: {shots[0]['target']}\n\nQ: ")
    assert ctx.endswith(f"\n\nQ: {doc['question']}\nA:")
    assert task.doc_to_target(doc) == doc["answer"].split("####")[-1].strip()
    task, doc, ctx = _context(task_manager, "gsm8k_local")  # 5 random shots from the train split
    assert ctx.count("Question: ") == 6 and "#### " in ctx and ctx.endswith(f"Question: {doc['question']}\nAnswer:")
    task, doc, ctx = _context(task_manager, "egsm_local")
    assert len(task.eval_docs) == 3  # the tuple-answer problem is dropped
    assert ctx.endswith(f"Q: {doc['question']}\nA:") and task.doc_to_target(doc) == doc["answer"]
    task, doc, ctx = _context(task_manager, "race_local")
    assert ctx.startswith("Article: Story 0.")
    assert "Question: What color is the sky?\nAnswer: blue\n" in ctx
    assert "Sam's pet is  a dog\n" in ctx  # cloze question filled in place (as lm-eval's race)
    assert ctx.endswith("How many cats are there in story 0?")
    assert task.doc_to_target(doc) == 2 and task.doc_to_choice(doc) == ["one", "two", "three", "four"]
    task, doc, ctx = _context(task_manager, "mmlu_local_anatomy", num_fewshot=1)
    assert ctx == ("The following are multiple choice questions (with answers) about anatomy.\n\n"
                   "dev question 0 about anatomy?\nA. w0\nB. x0\nC. y0\nD. z0\nAnswer: A\n\n"
                   "test question 0 about anatomy?\nA. w0\nB. x0\nC. y0\nD. z0\nAnswer:")
    task, doc, ctx = _context(task_manager, "minerva_math_local_algebra")
    assert len(minerva_math()) == 4 and ctx.count("Problem:\n") == 5 and ctx.endswith("\n\nSolution:")
    assert doc["type"] == "Algebra" and doc["answer"] == "1" and len(task.eval_docs) == 3
    task, doc, ctx = _context(task_manager, "hellaswag_local")
    assert ctx == "Making tea: A person boils water 0. they"  # [step] markup removed
    assert task.doc_to_choice(doc)[3] == "paint the wall. red."
    task, doc, ctx = _context(task_manager, "winogrande_local")
    assert ctx == ["The cup did not fit in the box 0 because the cup",
                   "The cup did not fit in the box 0 because the box"]
    assert task.doc_to_target(doc) == "was too big."
    task, doc, ctx = _context(task_manager, "mathqa_local")
    assert task.doc_to_choice(doc) == ["1", "0", "2", "3", "4"] and task.doc_to_target(doc) == 1
    task, doc, ctx = _context(task_manager, "mutual_local")
    assert doc["article"] == "m: hi, how are you? f: i'm fine, thanks."
    assert task.doc_to_choice(doc)[0] == "m: i don't like rain."
    task, doc, _ = _context(task_manager, "wikitext_local")
    assert task.doc_to_target(doc) == " = Article 0 =\nThe river is 10,000 km long, and it is well-known.\n"


def test_missing_data_dir_fails_with_a_clear_message(tmp_path):
    from lm_eval.tasks import TaskManager

    tm = TaskManager(include_path=str(TASKS_DIR), include_defaults=False)
    with pytest.raises(ValueError, match="no data directory; set eval.data_dir or \\$MATHNEURO_DATA_DIR"):
        tm.load(["piqa_local"])["tasks"]["piqa_local"].eval_docs  # noqa: B018


EXPECTED = {
    "gsm8k_cot": {"exact_match,strict-match", "exact_match,flexible-extract"},
    "gsm8k": {"exact_match,strict-match", "exact_match,flexible-extract"},
    "egsm": {"exact_match,strict-match", "exact_match,flexible-extract"},
    "minerva_math": {"exact_match", "math_verify"},
    "math500": {"exact_match", "math_verify"},
    "mathqa": {"acc", "acc_norm"},
    "race": {"acc"},
    "mmlu": {"acc"},
    "hellaswag": {"acc", "acc_norm"},
    "piqa": {"acc", "acc_norm"},
    "winogrande": {"acc"},
    "wikitext": {"word_perplexity", "byte_perplexity", "bits_per_byte"},
    "mutual": {"r@1", "r@2", "mrr"},
    "mutual_plus": {"r@1", "r@2", "mrr"},
}


@pytest.mark.e2e
def test_lm_eval_run_with_limit_returns_expected_metric_keys(data_dir):
    assert set(EXPECTED) == set(HARNESS_TASKS)
    model, tok = tiny_model("llama")
    cfg = EvalConfig(name="t", tasks=list(HARNESS_TASKS), data_dir=str(data_dir), limit=2, batch_size=4,
                     max_gen_toks=4, bootstrap_iters=10)
    cfg.limits.pop("gsm8k_cot")  # the paper's 200 would not matter here, but keep the run uniform
    ev = Evaluator(model, tok, cfg)
    metrics = ev.evaluate()
    for task, names in EXPECTED.items():
        kind = TASKS[task].kind
        got = {k.split("/", 2)[2] for k in metrics if k.split("/")[1] == task}
        assert {m for m in got if not m.endswith("_stderr")} == names, task
        for name in names:
            value = metrics[f"{kind}/{task}/{name}"]
            assert isinstance(value, float)
            if "perplexity" not in name and name != "bits_per_byte":
                assert 0.0 <= value <= 1.0
        if task in ("race", "piqa", "gsm8k_cot", "mathqa", "mutual"):
            assert all(f"{kind}/{task}/{n}_stderr" in metrics for n in names), task
    assert ev.last_num_examples["mmlu"] == 2 * len(MMLU_SUBJECTS)  # limit is per subtask, as in lm-eval
    assert ev.last_num_examples["minerva_math"] == 14 and ev.last_num_examples["race"] == 2
    assert all(s > 0 for s in ev.last_seconds.values())


def test_harness_reuses_hflm_sees_in_place_edits_and_keeps_rng(data_dir):
    model, tok = tiny_model("qwen2")
    cfg = EvalConfig(name="t", tasks=["wikitext", "piqa"], data_dir=str(data_dir), limit=2, batch_size=2)
    ev = Evaluator(model, tok, cfg)
    random.seed(7)
    torch.manual_seed(7)
    first = ev.evaluate()
    draws = (random.random(), float(torch.rand(1)))
    random.seed(7)
    torch.manual_seed(7)
    assert draws == (random.random(), float(torch.rand(1)))  # lm-eval's reseeding did not leak out
    lm, tm = ev.harness.lm, ev.harness.task_manager
    assert lm.model is model
    weight = model.model.layers[1].mlp.up_proj.weight
    saved = weight.detach().clone()
    with torch.no_grad():
        weight.mul_(50.0)
    edited = ev.evaluate()
    assert ev.harness.lm is lm and ev.harness.task_manager is tm
    assert edited["nonmath/wikitext/word_perplexity"] != first["nonmath/wikitext/word_perplexity"]
    with torch.no_grad():
        weight.copy_(saved)
    assert ev.evaluate() == first


def test_flatten_keeps_lm_eval_names():
    entry = {"alias": "gsm8k_cot", "exact_match,strict-match": 0.25, "exact_match_stderr,strict-match": 0.1,
             "acc,none": 0.5, "acc_stderr,none": "N/A", "word_perplexity,none": 12.0, "sample_len": 3}
    assert flatten_lm_eval_metrics(entry) == {"exact_match,strict-match": 0.25,
                                              "exact_match,strict-match_stderr": 0.1, "acc": 0.5,
                                              "word_perplexity": 12.0}


@pytest.mark.slow
@pytest.mark.skipif(not SHARED_DATA.is_dir(), reason="needs ../shared/data")
def test_local_tasks_read_the_shared_data_layout():
    from lm_eval.tasks import TaskManager

    for task in HARNESS_TASKS:
        assert missing_files(task, SHARED_DATA) == [], task
    tm = TaskManager(include_path=str(TASKS_DIR), include_defaults=False, metadata={"data_dir": str(SHARED_DATA)})
    sizes = {}
    for name in _all_leaf_tasks(tm):
        task = tm.load([name])["tasks"][name]
        task.set_fewshot_seed(1234)
        doc = task.eval_docs[0]
        context = task.fewshot_context(doc, num_fewshot=task.get_config("num_fewshot") or 0)
        assert context or task.OUTPUT_TYPE == "loglikelihood_rolling", name
        assert task.doc_to_target(doc) is not None
        sizes[name] = len(task.eval_docs)
    assert sizes["gsm8k_cot_local"] == 1319 and sizes["race_local"] == 1045
    assert sum(v for k, v in sizes.items() if k.startswith("mmlu_local_")) == 14042
    assert sum(v for k, v in sizes.items() if k.startswith("minerva_math_local_")) == 5000
