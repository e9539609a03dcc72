"""``process_results`` helpers of the local tasks, and MATH answer normalisation (no model output is executed)."""

from __future__ import annotations

import math
import re

from mathneuro.evaluation.answers import numbers_match, parse_number

# --------------------------------------------------------------------------- numbers (EGSM)


def is_number(text: str) -> bool:
    """Whether ``text`` is a single number."""
    return parse_number(text) is not None


def egsm_process_results(doc: dict, results: list[str]) -> dict[str, float]:
    """Exact match of the (filtered) answer with EGSM's numeric gold, to two decimals."""
    return {"exact_match": float(numbers_match(results[0], str(doc["answer"])))}


# --------------------------------------------------------------------------- MuTual


def mutual_process_results(doc: dict, results: list) -> dict[str, float]:
    """Recall at 1 and 2 and mean reciprocal rank of the right response among the options."""
    lls = [r[0] if isinstance(r, (tuple, list)) else float(r) for r in results]
    gold = "ABCD".index(doc["answers"])
    rank = sum(1 for ll in lls if ll > lls[gold])  # 0 = best
    return {"r@1": float(rank == 0), "r@2": float(rank <= 1), "mrr": 1.0 / (rank + 1)}


# --------------------------------------------------------------------------- WikiText


def wikitext_process_results(doc: dict, results: list) -> dict[str, tuple[float, int]]:
    """(log-likelihood, count) pairs for word / byte perplexity and bits per byte; counts on the raw page."""
    (loglikelihood,) = results
    words = len(re.split(r"\s+", doc["page"]))
    nbytes = len(doc["page"].encode("utf-8"))
    return {"word_perplexity": (loglikelihood, words), "byte_perplexity": (loglikelihood, nbytes),
            "bits_per_byte": (loglikelihood, nbytes)}


# --------------------------------------------------------------------------- MATH


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


def math_final_answer(generation: str) -> str | None:
    """The answer of a Minerva-style solution: "Final Answer: The final answer is X." else the last boxed."""
    found = re.search(r"Final Answer: The final answer is(.*?)\.?\s*I hope it is correct",
                      generation + " I hope it is correct.", flags=re.DOTALL)
    if found:
        return found.group(1).strip()
    return last_boxed(generation)


def math_answer_filter(resps: list[list[str]], docs: list[dict]) -> list[str]:
    """lm-eval ``custom`` filter: each document's (first) generation -> its final answer (:func:`math_final_answer`;
    "" if none), as lm-eval's ``take_first`` keeps one response per document."""
    return [(math_final_answer(rs[0] if isinstance(rs, list) else rs) or "").strip() if rs else "" for rs in resps]


def math_answer_process_results(doc: dict, results: list[str]) -> dict[str, float]:
    """As :func:`math_process_results`, for an answer already extracted by :func:`math_answer_filter`."""
    from mathneuro.evaluation.math_equivalence import math_answers_equal

    predicted = results[0].strip() if results and results[0] else ""
    if not predicted:
        return {"exact_match": 0.0, "math_verify": 0.0}
    gold = doc.get("gold_latex") or doc["answer"]
    return {"exact_match": float(math_strings_equal(normalize_math_answer(predicted), doc["answer"])),
            "math_verify": float(math_answers_equal(predicted.strip("$"), gold))}


def math_process_results(doc: dict, results: list[str]) -> dict[str, float]:
    """``exact_match``: the normalised final answer equals the normalised boxed gold (strings or numbers);
    ``math_verify``: the two are equal symbolically (:func:`mathneuro.evaluation.math_answers_equal`)."""
    from mathneuro.evaluation.math_equivalence import math_answers_equal

    predicted = math_final_answer(results[0])
    if predicted is None:
        return {"exact_match": 0.0, "math_verify": 0.0}
    gold = doc.get("gold_latex") or doc["answer"]
    return {"exact_match": float(math_strings_equal(normalize_math_answer(predicted), doc["answer"])),
            "math_verify": float(math_answers_equal(predicted.strip().strip("$"), gold))}
