"""``process_results`` helpers of the local tasks, and MATH answer normalisation (no model output is executed)."""

from __future__ import annotations

import re

from mathneuro.evaluation.answers import numbers_match, parse_number
from mathneuro.evaluation.math_equivalence import (  # noqa: F401 (last_boxed, normalize_math_answer: task helpers)
    last_boxed,
    math_answers_equal,
    math_strings_equal,
    normalize_math_answer,
)

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
    predicted = results[0].strip() if results and results[0] else ""
    if not predicted:
        return {"exact_match": 0.0, "math_verify": 0.0}
    gold = doc.get("gold_latex") or doc["answer"]
    return {"exact_match": float(math_strings_equal(normalize_math_answer(predicted), doc["answer"])),
            "math_verify": float(math_answers_equal(predicted.strip("$"), gold))}


def math_process_results(doc: dict, results: list[str]) -> dict[str, float]:
    """``exact_match``: the normalised final answer equals the normalised boxed gold (strings or numbers);
    ``math_verify``: the two are equal symbolically (:func:`mathneuro.evaluation.math_answers_equal`)."""
    predicted = math_final_answer(results[0])
    if predicted is None:
        return {"exact_match": 0.0, "math_verify": 0.0}
    gold = doc.get("gold_latex") or doc["answer"]
    return {"exact_match": float(math_strings_equal(normalize_math_answer(predicted), doc["answer"])),
            "math_verify": float(math_answers_equal(predicted.strip().strip("$"), gold))}
