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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from mathneuro.evaluation.config import EvalConfig
from mathneuro.evaluation.samples import pooled_records, records_from_lm_eval
from mathneuro.evaluation.task_index import needs_lm_eval_tasks
from mathneuro.evaluation.task_table import TASKS, lm_eval_name, local_tasks_dir

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
    """One task's harness result: flat metrics, examples evaluated, seconds, and lm-eval's raw entry.

    ``subtasks``: the flat metrics of every subtask and subgroup of a group (or every task of a tag),
    by name; ``samples``: per-example records of every evaluated leaf task (``eval.log_samples``).
    """

    metrics: dict[str, float]
    num_examples: int
    seconds: float
    raw: dict[str, Any]
    subtasks: dict[str, dict[str, float]] = field(default_factory=dict)
    samples: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    info: dict[str, dict[str, Any]] = field(default_factory=dict)  # task_info() of the task and its subtasks


def task_info(results: dict[str, Any], name: str) -> dict[str, Any]:
    """What lm-eval says of one evaluated task or group in ``simple_evaluate``'s results: its version
    (``lm_eval_version``), few-shot examples (``n_shot``) and metric directions (``higher_is_better``)."""
    info: dict[str, Any] = {"source": "lm-eval"}
    for key, field_name in (("versions", "lm_eval_version"), ("n-shot", "n_shot")):
        value = (results.get(key) or {}).get(name)
        if value is not None:
            info[field_name] = value
    directions = (results.get("higher_is_better") or {}).get(name)
    if isinstance(directions, dict):
        info["higher_is_better"] = {str(k): v for k, v in directions.items() if isinstance(v, bool)}
    return info


_TASK_MANAGERS: dict[tuple, Any] = {}


def shared_task_manager(folders: list[Path], include_defaults: bool, metadata: dict[str, Any] | None):
    """One lm-eval ``TaskManager`` per process for these folders and metadata (indexing lm-eval's own
    tasks takes tens of seconds, so it is done at most once; a manager with them serves both cases)."""
    import json

    from lm_eval.tasks import TaskManager

    base = (tuple(str(f) for f in folders), json.dumps(metadata, sort_keys=True, default=str))
    for key in ((*base, True), (*base, include_defaults)):
        if key in _TASK_MANAGERS:
            return _TASK_MANAGERS[key]
    start = time.perf_counter()
    manager = TaskManager(include_path=[str(f) for f in folders], include_defaults=include_defaults,
                          metadata=metadata)
    log.info("lm-eval TaskManager (%s lm-eval's tasks) built in %.1f s",
             "with" if include_defaults else "without", time.perf_counter() - start)
    _TASK_MANAGERS[(*base, include_defaults)] = manager
    return manager


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
        """The lm-eval model wrapping the model object (built on first use; batch size set here, not per call).

        It is lm-eval's ``mathneuro-hf`` backend (:class:`~mathneuro.evaluation.decoding.backend.MathneuroHFLM`),
        looked up in lm-eval's registry and built from keyword arguments as ``simple_evaluate`` builds it for a
        user. ``eval.prefix_cache`` is its ``prefix_cache``: on, generation tasks compute the prompt prefix their
        requests share (the few-shot exemplars) once per call; off, every request takes ``hf``'s own code.
        """
        if self._lm is None:
            from lm_eval.api.registry import get_model

            from mathneuro.evaluation.decoding.backend import BACKEND  # deferred: lm-eval's HF model stack

            kwargs: dict[str, Any] = {"pretrained": self.model, "tokenizer": self.tokenizer,
                                      "prefix_cache": self.cfg.prefix_cache, "draft": self.cfg.draft,
                                      "draft_tokens": self.cfg.draft_tokens, "prompt_lookup": self.cfg.prompt_lookup,
                                      "continuous_batching": self.cfg.continuous_batching}
            if self.cfg.max_length is not None:
                kwargs["max_length"] = self.cfg.max_length
            if self.cfg.softmax_dtype is not None:
                kwargs["softmax_dtype"] = self.cfg.softmax_dtype
            self._lm = get_model(BACKEND).create_from_arg_obj(kwargs, {"batch_size": self.cfg.batch_size})
        return self._lm

    @property
    def task_manager(self):
        """One ``TaskManager``: our local YAMLs, the user's ``eval.include_path`` folders, plus lm-eval's own
        tasks when a requested name is not found in those (shared by every harness of the process)."""
        if self._task_manager is None:
            _quiet_lm_eval()
            folders = [local_tasks_dir(), *self.cfg.include_paths()]
            names = [self.lm_eval_name(t) for t in self.cfg.tasks if t not in TASKS or TASKS[t].harness]
            metadata = {"data_dir": str(self.data_dir)} if self.data_dir is not None else None
            self._task_manager = shared_task_manager(folders, needs_lm_eval_tasks(names, folders[1:]), metadata)
        return self._task_manager

    def lm_eval_name(self, task: str) -> str:
        """The lm-eval task/group/tag name that runs ``task``: our table's choice (stock or local twin) for the
        tasks in it, the name itself for any other."""
        return lm_eval_name(task, self.data_dir) if task in TASKS else task

    def display_name(self, task: str, lm_name: str) -> str:
        """The name a (sub)task reports under: a local twin's subtasks take the table's names
        (``mmlu_local_anatomy`` -> ``mmlu_anatomy``, as stock lm-eval names it); others keep lm-eval's."""
        spec = TASKS.get(task)
        if lm_name == self.lm_eval_name(task):
            return task
        if spec is not None and spec.local and lm_name.startswith(spec.local):
            return task + lm_name[len(spec.local):]
        return lm_name

    def built_task(self, task: str) -> list:
        """The lm-eval ``Task`` / ``Group`` object(s) of ``task`` (a tag gives several), built once and reused."""
        name = self.lm_eval_name(task)
        if name not in self._built:
            loaded = self.task_manager.load([name])
            if name in loaded["groups"]:
                objs = [loaded["groups"][name]]
            elif name in loaded["tasks"]:
                objs = [loaded["tasks"][name]]
            else:  # a tag: its tasks
                objs = list(loaded["tasks"].values())
            if not objs:
                raise KeyError(f"lm-eval built no task or group named {name!r}")
            self._built[name] = objs
        return self._built[name]

    # ------------------------------------------------------------------ running
    def run(self, task: str) -> HarnessRun:
        """Evaluate ``task`` on the model as it is now; global RNG states are left as they were."""
        import lm_eval

        name = self.lm_eval_name(task)
        gen_kwargs = {"max_gen_toks": self.cfg.max_gen_toks} if self.cfg.max_gen_toks is not None else None
        start = time.perf_counter()
        with preserved_rng():
            objs = self.built_task(task)
            results = lm_eval.simple_evaluate(
                model=self.lm,
                tasks=list(objs),
                task_manager=self.task_manager,
                num_fewshot=self.cfg.num_fewshot,
                limit=self.cfg.limit_for(task),
                bootstrap_iters=self.cfg.bootstrap_iters,
                log_samples=self.cfg.log_samples,
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
        table = results["results"]
        entry = table.get(name, {})
        if name in table:
            nodes = _descendants(results, name)
        else:  # a tag: the tasks it stands for, each with its own subtree
            nodes = []
            for obj in objs:
                top = getattr(obj, "task_name", None) or getattr(obj, "name", None)
                nodes += [top, *_descendants(results, top)]
        subtasks = {self.display_name(task, n): flatten_lm_eval_metrics(table[n]) for n in nodes if n in table}
        n_samples = results.get("n-samples", {})
        leaves = _leaf_names(results, name) if name in table else [leaf for n in nodes
                                                                     for leaf in _leaf_names(results, n)]
        leaves = list(dict.fromkeys(leaves))
        count = sum(int(n_samples.get(leaf, {}).get("effective", 0)) for leaf in leaves)
        samples: dict[str, list[dict[str, Any]]] = {}
        if self.cfg.log_samples:
            logged = results.get("samples", {})
            samples = {self.display_name(task, leaf): records_from_lm_eval(logged.get(leaf, [])) for leaf in leaves}
            if name in table and name not in leaves:  # a group: its subtasks' records pooled, too
                samples[self.display_name(task, name)] = pooled_records(samples)
        info = {self.display_name(task, n): task_info(results, n) for n in dict.fromkeys([name, *nodes, *leaves])
                if n in table or n in (results.get("versions") or {})}
        return HarnessRun(flatten_lm_eval_metrics(entry), count, seconds, entry, subtasks, samples, info)


def _descendants(results: dict[str, Any], name: str) -> list[str]:
    """Every subgroup and subtask below ``name`` (depth first), without ``name`` itself."""
    out: list[str] = []
    for child in results.get("group_subtasks", {}).get(name, []) or []:
        out.append(child)
        out.extend(_descendants(results, child))
    return out


def _leaf_names(results: dict[str, Any], name: str) -> list[str]:
    subtasks = results.get("group_subtasks", {})
    if name not in subtasks or not subtasks[name]:
        return [name]
    leaves: list[str] = []
    for child in subtasks[name]:
        leaves.extend(_leaf_names(results, child))
    return leaves
