"""lm-evaluation-harness on the in-memory model: one ``HFLM`` and one ``TaskManager`` per evaluator.

The model object is wrapped once (lazily, on the first harness task) and reused, so in-place
edits of its weights are seen by every later call. Tasks are built once and reused too (datasets
read once). Each task runs in its own ``simple_evaluate`` call, so its result never depends on
which other tasks are requested; lm-eval reseeds the global RNGs on every call, so the caller's
RNG states are saved and restored around it.
"""

from __future__ import annotations

import contextlib
import logging
import random
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from mathneuro.evaluation.config import EvalConfig
from mathneuro.evaluation.tasks import TASKS, lm_eval_name, local_tasks_dir

log = logging.getLogger(__name__)


class _DropCustomDatasetNotice(logging.Filter):
    """Drops lm-eval's per-task "Custom kwargs can be passed to `--metadata`" notice (our local tasks all load
    through ``custom_dataset``; the notice says nothing useful about them)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "Custom kwargs can be passed" not in record.getMessage()


def _quiet_lm_eval() -> None:
    task_log = logging.getLogger("lm_eval.api.task")
    if not any(isinstance(f, _DropCustomDatasetNotice) for f in task_log.filters):
        task_log.addFilter(_DropCustomDatasetNotice())


@contextlib.contextmanager
def preserved_rng() -> Iterator[None]:
    """Restore the states of python ``random``, numpy's global RNG and torch (CPU and CUDA) on exit."""
    py_state = random.getstate()
    np_state = np.random.get_state()
    torch_state = torch.get_rng_state()
    cuda_states = torch.cuda.get_rng_state_all() if torch.cuda.is_available() and torch.cuda.is_initialized() else None
    try:
        yield
    finally:
        random.setstate(py_state)
        np.random.set_state(np_state)
        torch.set_rng_state(torch_state)
        if cuda_states is not None:
            torch.cuda.set_rng_state_all(cuda_states)


def stderr_key(metric: str) -> str:
    """The key of a metric's standard error: ``<metric>_stderr`` (``exact_match,strict-match_stderr``)."""
    return f"{metric}_stderr"


def flatten_lm_eval_metrics(entry: dict[str, Any]) -> dict[str, float]:
    """lm-eval's ``results[<task>]`` as ``{metric: value}``: lm-eval's names, the ``,none`` filter dropped.

    ``acc,none`` -> ``acc``; ``exact_match,strict-match`` stays; their stderr keys
    (``acc_stderr,none``, ``exact_match_stderr,strict-match``) become ``acc_stderr`` and
    ``exact_match,strict-match_stderr``. Non-numeric values (``"N/A"`` stderr, aliases) are dropped.
    """
    out: dict[str, float] = {}
    for key, value in entry.items():
        if "," not in key or isinstance(value, str) or value is None:
            continue
        try:
            number = float(value)
        except (TypeError, ValueError):
            continue
        metric, filt = key.split(",", 1)
        is_stderr = metric.endswith("_stderr")
        base = metric[: -len("_stderr")] if is_stderr else metric
        name = base if filt == "none" else f"{base},{filt}"
        out[stderr_key(name) if is_stderr else name] = number
    return out


@dataclass
class HarnessRun:
    """One task's harness result: flat metrics, examples evaluated, seconds, and lm-eval's raw entry."""

    metrics: dict[str, float]
    num_examples: int
    seconds: float
    raw: dict[str, Any]


class Harness:
    """Runs our harness tasks (stock or local twins) on one in-memory model, reusing one HFLM and TaskManager."""

    def __init__(self, model: torch.nn.Module, tokenizer, cfg: EvalConfig, data_dir: Path | None) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.cfg = cfg
        self.data_dir = data_dir
        self._lm = None
        self._task_manager = None
        self._built: dict[str, Any] = {}

    # ------------------------------------------------------------------ lazily built pieces
    @property
    def lm(self):
        """The ``HFLM`` wrapping the model object (built on first use; batch size set here, not per call).

        With ``eval.prefix_cache`` it is a :class:`PrefixCacheHFLM`: generation tasks compute the
        prompt prefix their requests share (the few-shot exemplars) once per call.
        """
        if self._lm is None:
            from lm_eval.models.huggingface import HFLM

            from mathneuro.evaluation.prefix_cache import PrefixCacheHFLM

            wrapper = PrefixCacheHFLM if self.cfg.prefix_cache else HFLM
            kwargs: dict[str, Any] = {"batch_size": self.cfg.batch_size}
            if self.cfg.max_length is not None:
                kwargs["max_length"] = self.cfg.max_length
            if self.cfg.softmax_dtype is not None:
                kwargs["softmax_dtype"] = self.cfg.softmax_dtype
            self._lm = wrapper(pretrained=self.model, tokenizer=self.tokenizer, **kwargs)
        return self._lm

    @property
    def task_manager(self):
        """One ``TaskManager``: our local YAMLs, plus lm-eval's own tasks when a stock task is requested."""
        if self._task_manager is None:
            from lm_eval.tasks import TaskManager

            _quiet_lm_eval()
            needs_stock = any(self.lm_eval_name(t) == TASKS[t].stock for t in self.cfg.tasks if TASKS[t].harness)
            metadata = {"data_dir": str(self.data_dir)} if self.data_dir is not None else None
            self._task_manager = TaskManager(include_path=str(local_tasks_dir()), include_defaults=needs_stock,
                                             metadata=metadata)
        return self._task_manager

    def lm_eval_name(self, task: str) -> str:
        """The lm-eval task/group name that runs ``task`` with this evaluator's data dir."""
        return lm_eval_name(task, self.data_dir)

    def built_task(self, task: str):
        """The lm-eval ``Task`` or ``Group`` object of ``task``, built once and reused."""
        name = self.lm_eval_name(task)
        if name not in self._built:
            loaded = self.task_manager.load([name])
            obj = loaded["groups"][name] if name in loaded["groups"] else loaded["tasks"].get(name)
            if obj is None:
                raise KeyError(f"lm-eval built no task or group named {name!r}")
            self._built[name] = obj
        return self._built[name]

    # ------------------------------------------------------------------ running
    def run(self, task: str) -> HarnessRun:
        """Evaluate ``task`` on the model as it is now; global RNG states are left as they were."""
        import lm_eval

        name = self.lm_eval_name(task)
        gen_kwargs = {"max_gen_toks": self.cfg.max_gen_toks} if self.cfg.max_gen_toks is not None else None
        start = time.perf_counter()
        with preserved_rng():
            obj = self.built_task(task)
            results = lm_eval.simple_evaluate(
                model=self.lm,
                tasks=[obj],
                task_manager=self.task_manager,
                num_fewshot=self.cfg.num_fewshot,
                limit=self.cfg.limit_for(task),
                bootstrap_iters=self.cfg.bootstrap_iters,
                log_samples=False,
                gen_kwargs=gen_kwargs,
                apply_chat_template=self.cfg.apply_chat_template,
                fewshot_as_multiturn=self.cfg.fewshot_as_multiturn,
                system_instruction=self.cfg.system_instruction,
                fewshot_random_seed=self.cfg.fewshot_seed,
                confirm_run_unsafe_code=False,  # model-written code is never executed
            )
        seconds = time.perf_counter() - start
        if results is None:  # not rank 0
            return HarnessRun({}, 0, seconds, {})
        entry = results["results"][name]
        n_samples = results.get("n-samples", {})
        leaves = _leaf_names(results, name)
        count = sum(int(n_samples.get(leaf, {}).get("effective", 0)) for leaf in leaves)
        return HarnessRun(flatten_lm_eval_metrics(entry), count, seconds, entry)


def _leaf_names(results: dict[str, Any], name: str) -> list[str]:
    subtasks = results.get("group_subtasks", {})
    if name not in subtasks or not subtasks[name]:
        return [name]
    leaves: list[str] = []
    for child in subtasks[name]:
        leaves.extend(_leaf_names(results, child))
    return leaves
