"""Evaluation of the in-memory (edited) model: lm-evaluation-harness tasks, local task YAMLs, fast probes.

>>> from mathneuro.evaluation import EvalConfig, Evaluator
>>> ev = Evaluator(model, tokenizer, EvalConfig(tasks=["arith", "mc"]))   # doctest: +SKIP
>>> ev.evaluate()   # {"math/arith/exact_match": 0.59, ...}                 # doctest: +SKIP
"""

from mathneuro.util.exports import lazy_exports

__all__, __getattr__, __dir__ = lazy_exports(__name__, {
    "mathneuro.evaluation.config": (
        "ArithConfig", "EvalConfig", "GenerationProbeConfig", "MultipleChoiceConfig", "PerplexityConfig",
        "validate_config",
    ),
    "mathneuro.evaluation.evaluator": ("Evaluator", "metric_key"),
    "mathneuro.evaluation.harness": ("flatten_lm_eval_metrics", "preserved_rng", "stderr_key"),
    "mathneuro.evaluation.math_equivalence": ("math_answers_equal",),
    "mathneuro.evaluation.task_table": (
        "DATA_DIR_ENV", "HARNESS_TASKS", "PROBE_NAMES", "TASK_NAMES", "TASKS", "TaskSpec", "kind_of", "lm_eval_name",
        "local_tasks_dir",
    ),
})
