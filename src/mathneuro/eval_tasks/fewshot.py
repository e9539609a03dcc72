"""Few-shot exemplars of the stock tasks, read from the installed (pinned) lm-eval, so ours stay identical."""

from __future__ import annotations

import ast
from functools import lru_cache
from pathlib import Path

import yaml


def _stock_dir() -> Path:
    import lm_eval.tasks

    return Path(lm_eval.tasks.__file__).resolve().parent


@lru_cache(maxsize=1)
def _gsm8k_cot() -> tuple[tuple[tuple[str, str], ...], ...]:
    cfg = yaml.safe_load((_stock_dir() / "gsm8k" / "gsm8k-cot.yaml").read_text(encoding="utf-8"))
    return tuple(tuple(sorted(s.items())) for s in cfg["fewshot_config"]["samples"])


def gsm8k_cot() -> list[dict]:
    """The 8 chain-of-thought exemplars (``question``, ``target``) of lm-eval's ``gsm8k_cot``."""
    return [dict(s) for s in _gsm8k_cot()]


@lru_cache(maxsize=1)
def _minerva_math() -> tuple[tuple[tuple[str, str], ...], ...]:
    # Read the literal without importing the module (it needs math_verify, which we do not require).
    tree = ast.parse((_stock_dir() / "minerva_math" / "utils.py").read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == "list_fewshot_samples":
            for stmt in node.body:
                if isinstance(stmt, ast.Return) and stmt.value is not None:
                    return tuple(tuple(sorted(s.items())) for s in ast.literal_eval(stmt.value))
    raise RuntimeError("lm-eval's minerva_math/utils.py has no literal list_fewshot_samples()")


def minerva_math() -> list[dict]:
    """The 4 Minerva exemplars (``problem``, ``solution``, ``few_shot``) of lm-eval's ``minerva_math``."""
    return [dict(s) for s in _minerva_math()]
