"""``gsm8k_gen``: a thin alias of lm-eval's ``gsm8k_cot`` (the paper's metric) on the probe's problem file.

``gsm8k_gen`` runs exactly that task (its prompt, exemplars, stop sequences and ``strict-match`` /
``flexible-extract`` filters) through the harness, with the few-shot prefix computed once
(:class:`~mathneuro.evaluation.decoding.prefix_cache.PrefixCacheHFLM`), on the problems of
``eval.gsm8k_gen.file``, else ``<data_dir>/gsm8k/test.jsonl``, else mathneuro's own word problems
(offline). The file is linked as ``gsm8k/test.jsonl`` into a private data folder read by the local
twin ``gsm8k_cot_local``.

Metrics: lm-eval's names (``exact_match,strict-match``, ``exact_match,flexible-extract`` and
their stderr), plus ``exact_match`` = strict-match.
``eval.gsm8k_gen.num_fewshot`` and ``max_new_tokens`` become the run's ``num_fewshot`` and
``max_gen_toks``; ``reuse_prefix_cache: false`` (or ``eval.prefix_cache: false``) runs plain ``HFLM``.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import tempfile
from pathlib import Path

import torch

from mathneuro.evaluation.config import EvalConfig
from mathneuro.evaluation.harness import Harness, HarnessRun, stderr_key

STRICT = "exact_match,strict-match"


def alias_config(cfg: EvalConfig) -> EvalConfig:
    """The ``gsm8k_cot`` run that ``gsm8k_gen`` stands for under ``cfg`` (data dir set by the caller)."""
    g = cfg.gsm8k_gen
    derived = dataclasses.replace(cfg, name=f"{cfg.name}/gsm8k_gen", tasks=["gsm8k_cot"], num_fewshot=g.num_fewshot,
                                  max_gen_toks=g.max_new_tokens, prefix_cache=cfg.prefix_cache and g.reuse_prefix_cache,
                                  limits={**(cfg.limits or {}), "gsm8k_cot": cfg.limit_for("gsm8k_gen")})
    return derived


def link_problem_file(source: Path, folder: Path) -> Path:
    """``folder/gsm8k/test.jsonl`` pointing at ``source`` (a symlink, else a copy); returns ``folder``."""
    target = folder / "gsm8k" / "test.jsonl"
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.symlink(source.resolve(), target)
    except OSError:
        shutil.copyfile(source, target)
    return folder


class Gsm8kGen:
    """Runs ``gsm8k_gen`` (= lm-eval ``gsm8k_cot`` on the probe's problems) on one in-memory model, reusably."""

    def __init__(self, model: torch.nn.Module, tokenizer, cfg: EvalConfig, problem_file: Path) -> None:
        self._folder = tempfile.TemporaryDirectory(prefix="mathneuro-gsm8k-gen-")
        data_dir = link_problem_file(Path(problem_file), Path(self._folder.name))
        derived = alias_config(cfg)
        derived.data_dir = str(data_dir)
        self.harness = Harness(model, tokenizer, derived, data_dir)

    def run(self) -> HarnessRun:
        """lm-eval's metrics of the model as it is now, plus ``exact_match`` (= strict-match)."""
        run = self.harness.run("gsm8k_cot")
        if STRICT in run.metrics:
            run.metrics["exact_match"] = run.metrics[STRICT]
            if stderr_key(STRICT) in run.metrics:
                run.metrics[stderr_key("exact_match")] = run.metrics[stderr_key(STRICT)]
        return run


__all__ = ["Gsm8kGen", "STRICT", "alias_config", "link_problem_file"]
