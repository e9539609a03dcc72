"""Answer extraction and scoring helpers of the evaluation (pure functions, no model)."""

from __future__ import annotations

from mathneuro.eval_tasks import scoring
from mathneuro.evaluation.answers import (
    extract_integer,
    gold_answer,
    numbers_match,
    parse_number,
)


def test_numbers_and_gold():
    assert gold_answer("He has 3 + 4 = 7 apples.\n#### 7") == "7"
    assert gold_answer(" 42 ") == "42"
    assert parse_number("$1,234.50.") == 1234.5
    assert parse_number("abc") is None
    assert numbers_match("$1,000", "1000")
    assert numbers_match("13.33", "13.333333333333332")  # EGSM's computed golds
    assert numbers_match("205.74", "205.74")
    assert not numbers_match("13.3", "13.333333333333332")
    assert not numbers_match(None, "5")
    assert not numbers_match("0.001", "0.004")
    assert extract_integer(" 12\n") == 12
    assert extract_integer(" -3 apples") == -3
    assert extract_integer(" none") is None


def test_math_answer_normalisation_and_equivalence():
    assert scoring.last_boxed(r"so $x = \boxed{\frac{2}{3}}$.") == r"\frac{2}{3}"
    assert scoring.last_boxed(r"first \boxed{1} then \boxed{{a}+b}") == "{a}+b"
    assert scoring.last_boxed(r"\boxed 5$ done") == "5"
    assert scoring.last_boxed("no box") is None
    norm = scoring.normalize_math_answer
    assert norm(r"\dfrac{1}{2}") == r"\frac{1}{2}"
    assert norm(r"\frac12") == r"\frac{1}{2}"
    assert norm(r"x = 10\text{ cm}") == "10"
    assert norm("1,000") == "1000"
    assert norm(r"90^\circ") == "90"
    assert norm("5.0") == "5"
    assert scoring.math_answers_equal(norm("0.5"), norm(r"\frac{1}{2}"))
    assert scoring.math_answers_equal(norm("1/4"), norm("0.25"))
    assert not scoring.math_answers_equal(norm("3"), norm("4"))
    gen = " So the answer is $\\boxed{7}$.\nFinal Answer: The final answer is $7$. I hope it is correct.\n"
    assert scoring.math_final_answer(gen) == "$7$"
    assert scoring.math_process_results({"answer": "7"}, [gen]) == {"exact_match": 1.0}
    assert scoring.math_process_results({"answer": "8"}, [gen]) == {"exact_match": 0.0}
    assert scoring.math_process_results({"answer": "8"}, ["nothing"]) == {"exact_match": 0.0}


def test_scoring_helpers():
    assert scoring.egsm_process_results({"answer": "13.333333333333332"}, ["13.33"]) == {"exact_match": 1.0}
    assert scoring.egsm_process_results({"answer": "5.0"}, ["[invalid]"]) == {"exact_match": 0.0}
    assert scoring.is_number("300.0") and not scoring.is_number("(100, 10)")
    # MuTual: results are (loglikelihood, is_greedy) pairs; gold B has the 2nd best score.
    out = scoring.mutual_process_results({"answers": "B"}, [(-1.0, False), (-2.0, False), (-3.0, False), (-4.0, False)])
    assert out == {"r@1": 0.0, "r@2": 1.0, "mrr": 0.5}
    out = scoring.mutual_process_results({"answers": "C"}, [(-5.0, False), (-2.0, False), (-0.5, True), (-4.0, False)])
    assert out == {"r@1": 1.0, "r@2": 1.0, "mrr": 1.0}
    page = "a b  c\nd"
    assert scoring.wikitext_process_results({"page": page}, [-3.0]) == {
        "word_perplexity": (-3.0, 4), "byte_perplexity": (-3.0, 8), "bits_per_byte": (-3.0, 8)}
