"""Answer extraction and comparison for generated math answers (never executes model output)."""

from __future__ import annotations

import math
import re

_GOLD_MARK = "####"


def parse_number(text: str | None) -> float | None:
    """A float from a number as models write it (``$1,234.50.`` -> 1234.5); None if it is not one."""
    if text is None:
        return None
    cleaned = text.strip().replace(",", "").replace("$", "").rstrip(".")
    try:
        value = float(cleaned)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def gold_answer(answer: str) -> str:
    """The gold number of a GSM8K ``answer`` field (after ``####``), or the field itself."""
    return answer.split(_GOLD_MARK)[-1].strip() if _GOLD_MARK in answer else answer.strip()


def numbers_match(predicted: str | None, gold: str, rel_tol: float = 1e-4, decimals: int = 2) -> bool:
    """Whether two written numbers agree: equal to ``rel_tol``, or equal when rounded to ``decimals`` places.

    Rounding lets ``13.33`` match a computed gold such as ``13.333333333333332`` (EGSM).
    """
    p, g = parse_number(predicted), parse_number(gold)
    if p is None or g is None:
        return False
    if math.isclose(p, g, rel_tol=rel_tol, abs_tol=1e-9):
        return True
    return round(p, decimals) == round(g, decimals) and abs(g) > 10 ** (-decimals)


def extract_integer(text: str) -> int | None:
    """The first integer in ``text`` (the answer of an arithmetic probe), or None."""
    match = re.search(r"-?\d+", text.replace(",", ""))
    return int(match.group(0)) if match else None
