"""The table of evaluation tasks: their kind (math / non-math), stock lm-eval name, local twin and data files.

One name per task is used everywhere (``eval.tasks``, metric keys): the paper's lm-eval name
(``gsm8k_cot``, ``race``, ``mmlu``...) or a built-in probe (``arith``, ``mc``, ``ppl``, ``gsm8k_gen``).
With a data directory (``eval.data_dir`` or ``$MATHNEURO_DATA_DIR``) a harness task runs as its
local twin (our YAML under ``mathneuro/eval_tasks``, reading files laid out like ``../shared/data``);
without one it runs as the stock lm-eval task, which reads the Hugging Face Hub.
"""

from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass, field
from pathlib import Path

DATA_DIR_ENV = "MATHNEURO_DATA_DIR"
KINDS = ("math", "nonmath")

# The 57 MMLU subjects, as named by lm-eval's ``mmlu_<subject>`` tasks and ``by_subject/<subject>_*.jsonl``.
MMLU_SUBJECTS = (
    "abstract_algebra", "anatomy", "astronomy", "business_ethics", "clinical_knowledge", "college_biology",
    "college_chemistry", "college_computer_science", "college_mathematics", "college_medicine",
    "college_physics", "computer_security", "conceptual_physics", "econometrics", "electrical_engineering",
    "elementary_mathematics", "formal_logic", "global_facts", "high_school_biology", "high_school_chemistry",
    "high_school_computer_science", "high_school_european_history", "high_school_geography",
    "high_school_government_and_politics", "high_school_macroeconomics", "high_school_mathematics",
    "high_school_microeconomics", "high_school_physics", "high_school_psychology", "high_school_statistics",
    "high_school_us_history", "high_school_world_history", "human_aging", "human_sexuality",
    "international_law", "jurisprudence", "logical_fallacies", "machine_learning", "management", "marketing",
    "medical_genetics", "miscellaneous", "moral_disputes", "moral_scenarios", "nutrition", "philosophy",
    "prehistory", "professional_accounting", "professional_law", "professional_medicine",
    "professional_psychology", "public_relations", "security_studies", "sociology", "us_foreign_policy",
    "virology", "world_religions",
)

# MATH (Hendrycks) subsets: lm-eval's ``minerva_math_<suffix>`` task suffix -> the ``type`` field in math/test.jsonl.
MATH_SUBSETS = {
    "algebra": "Algebra",
    "counting_and_prob": "Counting & Probability",
    "geometry": "Geometry",
    "intermediate_algebra": "Intermediate Algebra",
    "num_theory": "Number Theory",
    "prealgebra": "Prealgebra",
    "precalc": "Precalculus",
}


@dataclass(frozen=True)
class TaskSpec:
    """One evaluation task: how it is named, which side it scores, and where it runs."""

    name: str
    kind: str  # "math" or "nonmath"
    stock: str | None = None  # lm-eval task or group name (reads the Hub); None: no stock version
    local: str | None = None  # our local task or group name (reads data_dir); None: no local version
    probe: bool = False  # a built-in probe (no harness)
    files: tuple[str, ...] = ()  # files the local version reads, relative to data_dir
    stock_needs: tuple[str, ...] = field(default=())  # python modules the stock task imports
    generates: bool = False  # decodes through lm-eval's generate_until (where drafted decoding applies)

    @property
    def harness(self) -> bool:
        """Whether the task runs through lm-evaluation-harness."""
        return not self.probe


_TASKS: tuple[TaskSpec, ...] = (
    # math (paper: GSM8K CoT; generalisation: MATH, EGSM, MathQA)
    TaskSpec("gsm8k_cot", "math", "gsm8k_cot", "gsm8k_cot_local", generates=True, files=("gsm8k/test.jsonl",)),
    TaskSpec("gsm8k", "math", "gsm8k", "gsm8k_local", generates=True, files=("gsm8k/test.jsonl", "gsm8k/train.jsonl")),
    TaskSpec("minerva_math", "math", "minerva_math", "minerva_math_local", generates=True, files=("math/test.jsonl",),
             stock_needs=("math_verify",)),
    TaskSpec("math500", "math", "minerva_math500", "math500_local", generates=True, files=("math500/test.jsonl",),
             stock_needs=("math_verify",)),
    TaskSpec("mathqa", "math", "mathqa", "mathqa_local", files=("mathqa/test_1000.jsonl",)),
    TaskSpec("egsm", "math", None, "egsm_local", generates=True, files=("egsm/egsm_full.jsonl",)),
    # non-math (paper: RACE, MMLU; generalisation: HellaSwag, MuTual, PIQA, WikiText, WinoGrande)
    TaskSpec("race", "nonmath", "race", "race_local", files=("race/test_high_by_article.jsonl",)),
    TaskSpec("mmlu", "nonmath", "mmlu", "mmlu_local",
             files=tuple(f"mmlu/by_subject/{s}_{split}.jsonl" for s in MMLU_SUBJECTS for split in ("test", "dev"))),
    TaskSpec("hellaswag", "nonmath", "hellaswag", "hellaswag_local", files=("hellaswag/validation.jsonl",)),
    TaskSpec("piqa", "nonmath", "piqa", "piqa_local", files=("piqa/validation.jsonl",)),
    TaskSpec("winogrande", "nonmath", "winogrande", "winogrande_local", files=("winogrande/validation.jsonl",)),
    TaskSpec("wikitext", "nonmath", "wikitext", "wikitext_local", files=("wikitext2/test.jsonl",)),
    TaskSpec("mutual", "nonmath", "mutual", "mutual_local", files=("mutual/validation.jsonl",)),
    TaskSpec("mutual_plus", "nonmath", "mutual_plus", "mutual_plus_local", files=("mutual_plus/validation.jsonl",)),
    # built-in probes (no harness)
    TaskSpec("arith", "math", probe=True),
    TaskSpec("gsm8k_gen", "math", probe=True, generates=True),  # through PrefixCacheHFLM
    TaskSpec("mc", "nonmath", probe=True),
    TaskSpec("ppl", "nonmath", probe=True),
)

TASKS: dict[str, TaskSpec] = {t.name: t for t in _TASKS}
TASK_NAMES: tuple[str, ...] = tuple(TASKS)
HARNESS_TASKS: tuple[str, ...] = tuple(t.name for t in _TASKS if t.harness)
PROBE_NAMES: tuple[str, ...] = tuple(t.name for t in _TASKS if t.probe)


def local_tasks_dir() -> Path:
    """The folder of our local lm-eval task YAMLs (an lm-eval ``include_path``)."""
    return Path(__file__).resolve().parent.parent / "eval_tasks"


def probe_data_dir() -> Path:
    """The folder of the small probe data files shipped with mathneuro."""
    return Path(__file__).resolve().parent.parent / "data" / "probes"


def resolve_data_dir(data_dir: str | None) -> Path | None:
    """``data_dir`` if given, else ``$MATHNEURO_DATA_DIR`` if set, as an absolute path; else None."""
    value = data_dir if data_dir else os.environ.get(DATA_DIR_ENV) or None
    return Path(value).expanduser().resolve() if value else None


def lm_eval_name(task: str, data_dir: Path | None) -> str:
    """The lm-eval task/group name that runs ``task``: the local twin with a data dir, else the stock one."""
    spec = TASKS[task]
    if spec.probe:
        raise ValueError(f"eval.tasks: {task!r} is a built-in probe, not an lm-eval task")
    if data_dir is not None and spec.local:
        return spec.local
    if spec.stock is None:
        raise ValueError(f"eval.data_dir: task {task!r} has no stock lm-eval version; set eval.data_dir "
                         f"(or ${DATA_DIR_ENV}) to a folder laid out like ../shared/data")
    return spec.stock


def kind_of(task: str, math_tasks: list[str] | tuple[str, ...] = (),
            nonmath_tasks: list[str] | tuple[str, ...] = ()) -> str:
    """``"math"`` or ``"nonmath"`` for ``task``: the two lists, else the table, else ``"nonmath"``."""
    if task in math_tasks:
        return "math"
    if task in nonmath_tasks:
        return "nonmath"
    spec = TASKS.get(task)
    return spec.kind if spec is not None else "nonmath"


def missing_files(task: str, data_dir: Path) -> list[str]:
    """The files the local version of ``task`` needs that ``data_dir`` lacks (relative paths)."""
    return [rel for rel in TASKS[task].files if not (data_dir / rel).is_file()]


def missing_modules(task: str) -> list[str]:
    """Python modules the stock version of ``task`` imports that are not installed."""
    return [m for m in TASKS[task].stock_needs if importlib.util.find_spec(m) is None]
