"""Evaluation of the in-memory (edited) model: lm-evaluation-harness tasks, local task YAMLs, fast probes.

>>> from mathneuro.evaluation import EvalConfig, Evaluator
>>> ev = Evaluator(model, tokenizer, EvalConfig(tasks=["arith", "mc"]))   # doctest: +SKIP
>>> ev.evaluate()   # {"math/arith/exact_match": 0.59, ...}                 # doctest: +SKIP
"""

from mathneuro.evaluation.config import (
    ArithConfig,
    EvalConfig,
    GenerationProbeConfig,
    MultipleChoiceConfig,
    PerplexityConfig,
    validate_config,
)
from mathneuro.evaluation.evaluator import Evaluator, metric_key
from mathneuro.evaluation.harness import flatten_lm_eval_metrics, preserved_rng, stderr_key
from mathneuro.evaluation.math_equivalence import math_answers_equal
from mathneuro.evaluation.task_table import (
    DATA_DIR_ENV,
    HARNESS_TASKS,
    PROBE_NAMES,
    TASK_NAMES,
    TASKS,
    TaskSpec,
    kind_of,
    lm_eval_name,
    local_tasks_dir,
)

__all__ = [
    "ArithConfig", "DATA_DIR_ENV", "EvalConfig", "Evaluator", "GenerationProbeConfig", "HARNESS_TASKS",
    "MultipleChoiceConfig", "PROBE_NAMES", "PerplexityConfig", "TASKS", "TASK_NAMES", "TaskSpec",
    "flatten_lm_eval_metrics", "kind_of", "lm_eval_name", "local_tasks_dir", "math_answers_equal", "metric_key", "preserved_rng",
    "stderr_key", "validate_config",
]
