"""Symbolic equality of two final math answers (LaTeX, ``\\boxed{}`` already stripped), via ``math-verify``.

``math-verify`` parses both answers to SymPy (its ANTLR 4.9.3 LaTeX backend, the version Hydra
pins) and compares them as numbers, expressions, intervals, sets, tuples or matrices. When either
side does not parse, or parsing/comparing takes longer than the timeout, the answers are compared
as normalised strings (and numbers) instead, as the MATH task twins' ``exact_match`` does. Model
output is parsed, never executed.
"""

from __future__ import annotations

import logging
import math
import re
import threading

log = logging.getLogger(__name__)

DEFAULT_TIMEOUT_SECONDS = 5


# ------------------------------------------------------------------ final answers as strings and numbers
def last_boxed(text: str) -> str | None:
    """The content of the last ``\\boxed{...}`` (or ``\\fbox{...}`` / ``\\boxed x``) in ``text``."""
    starts = [m for m in re.finditer(r"\\(?:boxed|fbox)", text)]
    if not starts:
        return None
    m = starts[-1]
    rest = text[m.end():]
    if rest.startswith(" "):
        return rest[1:].split("$")[0].strip()
    if not rest.startswith("{"):
        return None
    depth = 0
    for i, ch in enumerate(rest):
        depth += ch == "{"
        depth -= ch == "}"
        if depth == 0:
            return rest[1:i]
    return None


_UNITS = ("square", "ways", "integers", "dollars", "mph", "inches", "ft", "hours", "km", "units", "sue",
          "points", "feet", "minutes", "digits", "cents", "degrees", "cm", "gm", "pounds", "meters", "meals",
          "edges", "students", "childrentickets", "multiples")


def normalize_math_answer(answer: str) -> str:
    """A canonical string for a final MATH answer: no spacing, units, ``$``, ``\\text``, ``\\left``; ``frac`` braced."""
    s = answer.strip().split("=")[-1]
    for unit in _UNITS:
        s = re.sub(rf"(?<!\\)\b{unit}\b", "", s)
    for before, after in ((r"\left", ""), (r"\right", ""), (r"\!", ""), (r"\,", ""), (r"\;", ""), (r"\ ", ""),
                          ("dfrac", "frac"), ("tfrac", "frac"), (r"^\circ", ""), (r"^{\circ}", ""), (r"\%", ""),
                          ("%", ""), (r"\$", ""), ("$", ""), (r"\dots", ""), (r"\ldots", ""), ("mbox", "text")):
        s = s.replace(before, after)
    s = re.sub(r"\\text\{(.*?)\}", r"\1", s)
    s = re.sub(r"\\textbf\{(.*?)\}", r"\1", s)
    s = re.sub(r"\\boxed\{(.*)\}", r"\1", s)
    s = s.replace(" ", "")
    s = re.sub(r"frac([^{\\])([^{\\])", r"frac{\1}{\2}", s)  # \frac12 -> \frac{1}{2}
    s = re.sub(r"sqrt([^{\[\\])", r"sqrt{\1}", s)  # \sqrt2 -> \sqrt{2}
    if re.fullmatch(r"-?\d{1,3}(,\d{3})+(\.\d+)?", s):
        s = s.replace(",", "")
    s = s.rstrip(".")
    if re.fullmatch(r"-?\d+\.0+", s):
        s = s.split(".")[0]
    return s


def _as_number(s: str) -> float | None:
    frac = re.fullmatch(r"(-?)\\frac\{(-?\d+(?:\.\d+)?)\}\{(-?\d+(?:\.\d+)?)\}", s)
    if frac:
        den = float(frac.group(3))
        return None if den == 0 else (-1 if frac.group(1) else 1) * float(frac.group(2)) / den
    slash = re.fullmatch(r"(-?\d+(?:\.\d+)?)/(-?\d+(?:\.\d+)?)", s)
    if slash:
        den = float(slash.group(2))
        return None if den == 0 else float(slash.group(1)) / den
    try:
        return float(s)
    except ValueError:
        return None


def math_strings_equal(predicted: str, gold: str) -> bool:
    """Equal as normalised strings, or as numbers (integers, decimals, ``\\frac{a}{b}``, ``a/b``)."""
    if predicted == gold:
        return True
    p, g = _as_number(predicted), _as_number(gold)
    return p is not None and g is not None and math.isclose(p, g, rel_tol=1e-6, abs_tol=1e-9)


# ------------------------------------------------------------------ symbolic equality


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


def symbolic_equal(candidate: str, reference: str,
                   timeout_seconds: int | None = DEFAULT_TIMEOUT_SECONDS) -> bool | None:
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
