"""Symbolic equality of two final math answers (LaTeX, ``\\boxed{}`` already stripped), via ``math-verify``.

``math-verify`` parses both answers to SymPy (its ANTLR 4.9.3 LaTeX backend, the version Hydra
pins) and compares them as numbers, expressions, intervals, sets, tuples or matrices. When either
side does not parse, or parsing/comparing takes longer than the timeout, the answers are compared
as normalised strings (and numbers) instead, as the MATH task twins' ``exact_match`` does. Model
output is parsed, never executed.
"""

from __future__ import annotations

import logging
import threading

log = logging.getLogger(__name__)

DEFAULT_TIMEOUT_SECONDS = 5


def _timeout(seconds: int | None) -> int | None:
    # math-verify times out with signal.alarm, which only works in the main thread; elsewhere run without it.
    if seconds is None or seconds <= 0 or threading.current_thread() is not threading.main_thread():
        return None
    return max(1, int(seconds))


def _parsed(text: str, seconds: int | None) -> list:
    from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse

    source = text if "$" in text or "\\boxed" in text else f"${text}$"
    found = parse(source, extraction_config=[LatexExtractionConfig(), ExprExtractionConfig()],
                  parsing_timeout=seconds)
    return found if any(not isinstance(item, str) for item in found) else []


def symbolic_equal(candidate: str, reference: str, timeout_seconds: int | None = DEFAULT_TIMEOUT_SECONDS) -> bool | None:
    """math-verify's verdict on two answers; None when either side does not parse (or times out)."""
    seconds = _timeout(timeout_seconds)
    try:
        gold = _parsed(reference, seconds)
        pred = _parsed(candidate, seconds)
        if not gold or not pred:
            return None
        from math_verify import verify

        return bool(verify(gold, pred, timeout_seconds=seconds))
    except Exception as exc:  # parse errors and math-verify's TimeoutException alike: fall back
        log.debug("math-verify gave up on %r vs %r (%s)", candidate, reference, exc)
        return None


def math_answers_equal(candidate: str, reference: str, timeout_seconds: int | None = DEFAULT_TIMEOUT_SECONDS) -> bool:
    """Whether ``candidate`` states the same final answer as ``reference`` (both LaTeX, no ``\\boxed``).

    Equal normalised strings are equal; otherwise math-verify decides symbolically (``\\dfrac{1}{2}``
    = ``0.5``, ``2\\sqrt{2}`` = ``\\sqrt{8}``, ``\\{1,2\\}`` = ``\\{2,1\\}``); if either side does not
    parse within ``timeout_seconds`` (per parse and per comparison), the normalised strings decide.
    """
    from mathneuro.eval_tasks.scoring import math_strings_equal, normalize_math_answer  # (import cycle)

    cand, ref = str(candidate).strip(), str(reference).strip()
    if not cand or not ref:
        return False
    norm_cand, norm_ref = normalize_math_answer(cand), normalize_math_answer(ref)
    if norm_cand and math_strings_equal(norm_cand, norm_ref):
        return True
    verdict = symbolic_equal(cand, ref, timeout_seconds)
    if verdict is not None:
        return verdict
    return bool(norm_cand) and math_strings_equal(norm_cand, norm_ref)
