"""``EvalConfig``: what to evaluate and how, as a Hydra structured config (config group ``eval``).

Only primitives, optionals, lists of primitives and nested dataclasses, all with defaults, so
that it can be stored in Hydra's ConfigStore. :meth:`EvalConfig.validate` checks what types
cannot and raises ``ValueError`` with one line naming the key and the allowed values; it runs
before any model loads. The defaults are the paper's evaluation (docs/method.md#5-evaluation-in-the-paper).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from mathneuro.evaluation.decoding.drafts import DRAFT_MODES
from mathneuro.evaluation.decoding.greedy_search import PROMPT_LOOKUP_MODES
from mathneuro.evaluation.probe_registry import is_probe, probe_spec
from mathneuro.evaluation.task_index import check_task_names, include_paths, local_task_names
from mathneuro.evaluation.task_table import (
    DATA_DIR_ENV,
    TASKS,
    kind_of,
    missing_files,
    missing_modules,
    resolve_data_dir,
)

OPERATIONS = ("+", "-", "*")


@dataclass
class ArithConfig:
    """Arithmetic probe: generated ``a <op> b =`` problems, answered greedily, scored by exact match."""

    num_problems: int = 100
    digits: int = 1  # operands have exactly this many digits (1: 0-9)
    operations: list[str] = field(default_factory=lambda: ["+"])  # any of "+", "-", "*"
    num_fewshot: int = 5  # solved examples before each problem (the same for every problem)
    seed: int = 0  # draws the problems and the examples (a private RNG; global RNGs untouched)
    max_new_tokens: int = 8


@dataclass
class GenerationProbeConfig:
    """``gsm8k_gen``: lm-eval's ``gsm8k_cot`` (prompt, stops, strict/flexible filters) on this problem file."""

    file: Optional[str] = None  # .jsonl with question/answer; None: <data_dir>/gsm8k/test.jsonl, else our word problems
    num_fewshot: int = 8  # lm-eval gsm8k_cot exemplars before each question
    max_new_tokens: int = 256  # lm-eval max_gen_toks of this run
    # with eval.prefix_cache: the shared few-shot prefix computed once (PrefixCacheHFLM)
    reuse_prefix_cache: bool = True


@dataclass
class MultipleChoiceConfig:
    """Multiple-choice probe: accuracy of the most likely choice (log-likelihood), as lm-eval's acc / acc_norm."""

    file: Optional[str] = None  # .jsonl with question, choices [...], answer (index); None: our shipped file


@dataclass
class PerplexityConfig:
    """Perplexity probe: log-likelihood of a text set, in windows of ``max_length`` tokens."""

    file: Optional[str] = None  # .txt (documents separated by blank lines) or .jsonl with "text"; None: ours
    max_length: int = 512


# The per-task limits of the paper's evaluation (docs/method.md#5-evaluation-in-the-paper): GSM8K-CoT on 200 problems.
DEFAULT_LIMITS: dict[str, Optional[float]] = {"gsm8k_cot": 200}


@dataclass
class EvalConfig:
    """What the evaluator runs on the model as it is now; defaults: the paper's GSM8K-CoT (200), RACE, MMLU."""

    name: str = "paper"
    tasks: list[str] = field(default_factory=lambda: ["gsm8k_cot", "race", "mmlu"])  # empty: evaluation off
    limit: Optional[float] = None  # examples per task (per subtask for groups such as mmlu); < 1: a fraction
    limits: dict[str, Optional[float]] = field(default_factory=lambda: dict(DEFAULT_LIMITS))  # task -> limit
    num_fewshot: Optional[int] = None  # harness tasks only; tasks fixed at 0 shots stay at 0 (lm-eval's rule)
    batch_size: int = 8  # set on the HFLM wrapper and used by the probes
    data_dir: Optional[str] = None  # local copies laid out like ../shared/data (else $MATHNEURO_DATA_DIR, else Hub)
    baseline: bool = True  # also evaluate the unedited model (the runner caches it per model + eval config)
    bootstrap_iters: int = 1000  # lm-eval stderr: closed form for means; bootstrap for perplexities; 0: none
    max_gen_toks: Optional[int] = None  # cap on generated tokens for lm-eval generation tasks
    # a prompt shared by requests is computed once: few-shot prefix, multiple-choice context (false: plain HFLM)
    prefix_cache: bool = True
    # greedy decoding drafted from the unedited model's answers where stored (needs prefix_cache); none: off
    draft: str = "baseline"
    draft_tokens: Optional[int] = None  # length of lookup drafts (null: adaptive, by acceptance and a pass's cost)
    # greedy rows without a baseline draft draft by lookup in their prompt and own tokens; auto: in float32
    prompt_lookup: str = "auto"
    # greedy requests decode batch_size at a time, a finished row's slot going to the next; auto: in float32
    continuous_batching: str = "auto"
    max_length: Optional[int] = None  # HFLM context length (None: from the model config)
    softmax_dtype: Optional[str] = "float32"  # HFLM log-softmax dtype; null: the model's (bf16 rounds log-probs)
    apply_chat_template: bool = False
    fewshot_as_multiturn: bool = False
    system_instruction: Optional[str] = None
    fewshot_seed: int = 1234  # lm-eval's few-shot sampler seed (lm-eval's default)
    math_tasks: list[str] = field(default_factory=list)  # override the table: count these as math
    nonmath_tasks: list[str] = field(default_factory=list)  # ... and these as non-math
    include_path: Any = None  # folder or list of folders of the user's own lm-eval task YAMLs
    log_samples: bool = False  # write <run dir>/samples/<task>.jsonl: per-example metrics (and answers)
    progress: bool = True  # tqdm bars in the probes
    arith: ArithConfig = field(default_factory=ArithConfig)
    gsm8k_gen: GenerationProbeConfig = field(default_factory=GenerationProbeConfig)
    mc: MultipleChoiceConfig = field(default_factory=MultipleChoiceConfig)
    ppl: PerplexityConfig = field(default_factory=PerplexityConfig)

    # ------------------------------------------------------------------ helpers
    @classmethod
    def coerce(cls, cfg: Any) -> EvalConfig:
        """An ``EvalConfig`` from an ``EvalConfig``, an OmegaConf node or a plain mapping (type-checked)."""
        if isinstance(cfg, cls):
            return cfg
        from omegaconf import DictConfig, OmegaConf

        data = OmegaConf.to_container(cfg, resolve=True) if isinstance(cfg, DictConfig) else dict(cfg)
        return OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(cls), data))

    def fingerprint(self) -> str:
        """A stable hash of everything that decides the scores (config, resolved data dir, lm-eval version).

        The runner keys its cache of baseline (unedited) results by model identity + this.
        """
        import hashlib
        import json
        from dataclasses import asdict
        from importlib.metadata import PackageNotFoundError, version

        try:
            lm_eval_version = version("lm_eval")
        except PackageNotFoundError:
            lm_eval_version = "absent"
        data = asdict(self)
        data.pop("name")
        data.pop("progress")
        data.pop("baseline")
        data["data_dir"] = str(self.resolved_data_dir()) if self.resolved_data_dir() else None
        data["tasks"] = list(self.tasks)
        data.pop("log_samples")  # records are a by-product; the scores do not depend on them
        data.pop("draft")  # drafted decoding gives the tokens of undrafted greedy decoding
        data.pop("draft_tokens")
        data.pop("prompt_lookup")  # the same tokens in float32 (its default); an option in bf16 (docs/drafting.md)
        data.pop("continuous_batching")  # likewise
        data["limits"] = {k: v for k, v in sorted((self.limits or {}).items()) if v is not None}
        data["include_path"] = [str(p) for p in self.include_paths()]
        data["include_files"] = _folder_digest(self.include_paths())
        data["lm_eval"] = lm_eval_version
        blob = json.dumps(data, sort_keys=True, default=str)
        return hashlib.sha256(blob.encode()).hexdigest()

    def is_enabled(self) -> bool:
        """False when no task is requested (``eval=none``)."""
        return len(self.tasks) > 0

    def resolved_data_dir(self) -> Path | None:
        """``data_dir``, else ``$MATHNEURO_DATA_DIR``, as an absolute path; None when neither is set."""
        return resolve_data_dir(self.data_dir)

    def include_paths(self) -> list[Path]:
        """``include_path`` as absolute folders, relative ones resolved against the directory the command
        was started in (Hydra's original working directory)."""
        return include_paths(self.include_path)

    def limit_for(self, task: str) -> float | int | None:
        """The example limit of ``task``: ``limits[task]`` if set, else ``limit``; ints stay ints."""
        value = (self.limits or {}).get(task)
        if value is None:
            value = self.limit
        if value is None:
            return None
        return int(value) if value >= 1 else float(value)

    def side(self, task: str, parent: str | None = None) -> str:
        """``"math"`` or ``"nonmath"``, the side ``task``'s metrics count for (``<side>/<task>/<metric>``):
        ``math_tasks`` / ``nonmath_tasks``, else a probe's own kind, else the task table, else non-math; a
        subtask (``parent`` given) not listed itself takes its parent's side."""
        if parent is not None and parent != task:
            listed = task in self.math_tasks or task in self.nonmath_tasks
            return kind_of(task, self.math_tasks, self.nonmath_tasks) if listed else self.side(parent)
        if task not in TASKS and task not in self.math_tasks and task not in self.nonmath_tasks and is_probe(task):
            return probe_spec(task).kind
        return kind_of(task, self.math_tasks, self.nonmath_tasks)

    # ------------------------------------------------------------------ validation
    def validate(self) -> None:
        """Raise ``ValueError`` (one line: key and allowed values) on the first bad value; else return None."""
        folders = self._validate_include_path()
        seen: set[str] = set()
        for task in self.tasks:
            if not isinstance(task, str) or not task:
                raise ValueError(f"eval.tasks: task names are non-empty strings, got {task!r}")
            if task in seen:
                raise ValueError(f"eval.tasks: task {task!r} is listed twice")
            seen.add(task)
            if task not in TASKS and is_probe(task):
                probe_spec(task)  # imports a user's probe now, before any model loads
        check_task_names([t for t in self.tasks if t in TASKS or not is_probe(t)], folders)
        both = set(self.math_tasks) & set(self.nonmath_tasks)
        if both:
            raise ValueError(f"eval.math_tasks: {sorted(both)[0]!r} is also in eval.nonmath_tasks; pick one")
        _check_limit("eval.limit", self.limit)
        for key, value in (self.limits or {}).items():
            _check_limit(f"eval.limits.{key}", value)
        if self.num_fewshot is not None and self.num_fewshot < 0:
            raise ValueError(f"eval.num_fewshot: must be >= 0 or null, got {self.num_fewshot}")
        _check_min("eval.batch_size", self.batch_size, 1)
        _check_min("eval.bootstrap_iters", self.bootstrap_iters, 0)
        if self.max_gen_toks is not None:
            _check_min("eval.max_gen_toks", self.max_gen_toks, 1)
        if self.max_length is not None:
            _check_min("eval.max_length", self.max_length, 2)
        if self.draft not in DRAFT_MODES:
            raise ValueError(f"eval.draft: unknown value {self.draft!r}; allowed: {', '.join(DRAFT_MODES)}")
        if self.draft_tokens is not None:
            _check_min("eval.draft_tokens", self.draft_tokens, 1)
        for key in ("prompt_lookup", "continuous_batching"):
            if getattr(self, key) not in PROMPT_LOOKUP_MODES:
                raise ValueError(f"eval.{key}: unknown value {getattr(self, key)!r}; allowed: "
                                 f"{', '.join(PROMPT_LOOKUP_MODES)}")
        if self.softmax_dtype not in (None, "float32", "float64", "bfloat16", "float16"):
            raise ValueError(f"eval.softmax_dtype: unknown dtype {self.softmax_dtype!r}; "
                             "allowed: float32, float64, bfloat16, float16, null")
        self._validate_probes()
        self._validate_data()

    def _validate_include_path(self) -> list[Path]:
        value = self.include_path
        if value is not None and not isinstance(value, (str, list, tuple)):
            raise ValueError(f"eval.include_path: a folder or a list of folders, got {value!r}")
        folders = self.include_paths()
        for raw, folder in zip([value] if isinstance(value, str) else list(value or []), folders, strict=True):
            if not folder.is_dir():
                raise ValueError(f"eval.include_path: no such directory {str(raw)!r} (resolved to {str(folder)!r})")
        return folders

    def _validate_probes(self) -> None:
        a = self.arith
        _check_min("eval.arith.num_problems", a.num_problems, 1)
        if not 1 <= a.digits <= 9:
            raise ValueError(f"eval.arith.digits: must be in 1..9, got {a.digits}")
        if not a.operations:
            raise ValueError(f"eval.arith.operations: must not be empty; allowed: {', '.join(OPERATIONS)}")
        for op in a.operations:
            if op not in OPERATIONS:
                raise ValueError(f"eval.arith.operations: unknown operation {op!r}; allowed: {', '.join(OPERATIONS)}")
        _check_min("eval.arith.num_fewshot", a.num_fewshot, 0)
        _check_min("eval.arith.max_new_tokens", a.max_new_tokens, 1)
        g = self.gsm8k_gen
        _check_min("eval.gsm8k_gen.num_fewshot", g.num_fewshot, 0)
        if g.num_fewshot > 8:
            raise ValueError(f"eval.gsm8k_gen.num_fewshot: at most 8 worked examples exist, got {g.num_fewshot}")
        _check_min("eval.gsm8k_gen.max_new_tokens", g.max_new_tokens, 1)
        _check_min("eval.ppl.max_length", self.ppl.max_length, 2)
        for key, path in (("gsm8k_gen.file", g.file), ("mc.file", self.mc.file), ("ppl.file", self.ppl.file)):
            if path is not None and not Path(path).expanduser().is_file():
                raise ValueError(f"eval.{key}: no such file {path!r}")

    def _validate_data(self) -> None:
        harness = [t for t in self.tasks if t in TASKS and not is_probe(t)]
        if self.data_dir is not None and not Path(self.data_dir).expanduser().is_dir():
            raise ValueError(f"eval.data_dir: no such directory {self.data_dir!r}")
        data_dir = self.resolved_data_dir()
        if data_dir is not None and not data_dir.is_dir():
            raise ValueError(f"eval.data_dir: ${DATA_DIR_ENV} names no directory ({str(data_dir)!r})")
        others = [t for t in self.tasks if t not in TASKS]
        if others and data_dir is None:
            ours = local_task_names()
            for task in others:
                if task in ours:
                    raise ValueError(f"eval.tasks: {task!r} is one of mathneuro's local tasks and reads files; set "
                                     f"eval.data_dir (or ${DATA_DIR_ENV}) to a folder laid out like ../shared/data")
        for task in harness:
            spec = TASKS[task]
            if data_dir is not None:
                missing = missing_files(task, data_dir)
                if missing:
                    raise ValueError(f"eval.data_dir: task {task!r} needs {missing[0]} under {data_dir} "
                                     f"(layout of ../shared/data); {len(missing)} file(s) missing")
            elif spec.stock is None:
                raise ValueError(f"eval.tasks: {task!r} has no stock lm-eval task; set eval.data_dir "
                                 f"(or ${DATA_DIR_ENV}) to a folder laid out like ../shared/data")
            else:
                absent = missing_modules(task)
                if absent:
                    raise ValueError(f"eval.tasks: stock {spec.stock!r} needs python module {absent[0]!r} "
                                     f"(pip install 'lm-eval[math]'), or set eval.data_dir for the local version")


def validate_config(cfg: Any) -> None:
    """Validate an ``EvalConfig``, an OmegaConf node or a mapping (e.g. Hydra's ``cfg.eval``); raise ``ValueError``."""
    EvalConfig.coerce(cfg).validate()


def _folder_digest(folders: list[Path]) -> str | None:
    """A hash of the task files (YAML and Python helpers) under ``folders``: edited user tasks change it."""
    if not folders:
        return None
    import hashlib

    digest = hashlib.sha256()
    for folder in folders:
        for path in sorted(folder.glob("**/*")):
            if not path.is_file():
                continue
            digest.update(str(path.relative_to(folder)).encode())
            if path.suffix in (".yaml", ".yml", ".py"):
                digest.update(path.read_bytes())
            else:  # data files: size and modification time (they may be large)
                stat = path.stat()
                digest.update(f"{stat.st_size}:{stat.st_mtime_ns}".encode())
    return digest.hexdigest()


def _check_limit(key: str, value: float | None) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{key}: must be a number (a count, or a fraction below 1) or null, got {value!r}")
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"{key}: must be > 0 (a count, or a fraction below 1) or null, got {value!r}")


def _check_min(key: str, value: int, low: int) -> None:
    if value < low:
        raise ValueError(f"{key}: must be >= {low}, got {value}")
