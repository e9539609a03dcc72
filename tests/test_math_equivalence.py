"""``math_answers_equal``: MATH-style final answers compared symbolically (math-verify, ANTLR 4.9.3 backend),
in the same process as Hydra (whose antlr4 4.9.3 pin math-verify's ``antlr4_9_3`` extra shares)."""

from __future__ import annotations

from importlib.metadata import version

import hydra  # noqa: F401  (the point: both in one process)
import pytest
from omegaconf import OmegaConf

from mathneuro.evaluation import math_answers_equal
from mathneuro.evaluation.math_equivalence import math_strings_equal, normalize_math_answer, symbolic_equal

EQUAL = [
    # fractions, decimals, \dfrac / \tfrac / unbraced \frac
    ("0.5", r"\frac{1}{2}"),
    (r"\dfrac{3}{4}", r"\frac34"),
    (r"\tfrac{2}{3}", r"\frac{2}{3}"),
    ("0.75", r"\frac{3}{4}"),
    ("2/4", r"\frac{1}{2}"),
    (r"-\frac{1}{2}", "-0.5"),
    ("5.00", "5"),
    # intervals and tuples
    (r"(-\infty, 3]", r"(-\infty,3]"),
    (r"\left[ 2, 5 \right)", "[2,5)"),
    (r"(1, 2)", "(1,2)"),
    (r"(3, -1)", r"\left(3,-1\right)"),
    (r"(-\infty,-2)\cup(2,\infty)", r"(-\infty, -2) \cup (2, \infty)"),
    # radicals and expressions
    (r"2\sqrt{2}", r"\sqrt{8}"),
    (r"\frac{\sqrt{3}}{2}", r"\frac{1}{2}\sqrt{3}"),
    (r"\sqrt2", r"\sqrt{2}"),
    (r"x^2+2x+1", r"(x+1)^2"),
    (r"6\pi", r"6 \pi"),
    # units, \text{}, money
    (r"10\text{ cm}", "10"),
    (r"12 \text{ inches}", "12"),
    (r"\$5", "5"),
    (r"\text{Monday}", r"\text{Monday}"),
    # thousands separators
    ("1,000", "1000"),
    (r"1{,}000{,}000", "1000000"),
    ("12,345.5", "12345.5"),
    # degrees and percent
    (r"30^\circ", "30"),
    (r"45^{\circ}", "45"),
    (r"25\%", "25"),
    # sets, lists of solutions
    (r"\{1,2,3\}", r"\{3,2,1\}"),
    ("1, 2", "2, 1"),
    # matrices
    (r"\begin{pmatrix}1\\2\end{pmatrix}", r"\begin{pmatrix} 1 \\ 2 \end{pmatrix}"),
    (r"\begin{pmatrix}1&0\\0&1\end{pmatrix}", r"\begin{pmatrix}1 & 0\\ 0 & 1\end{pmatrix}"),
    # equations stated as answers
    ("x=5", "5"),
    ("y = 2x + 3", "2x+3"),
    (r"\infty", r"\infty"),
]

DIFFERENT = [
    ("3", "4"),
    ("0.333", r"\frac{1}{3}"),
    (r"\frac{1}{2}", r"\frac{1}{3}"),
    ("[2,5)", "(2,5)"),
    ("(1, 2)", "(2, 1)"),
    (r"2\sqrt{3}", r"\sqrt{8}"),
    (r"\begin{pmatrix}1\\3\end{pmatrix}", r"\begin{pmatrix}1\\2\end{pmatrix}"),
    (r"\{1,2\}", r"\{1,2,3\}"),
    (r"\pi", "3.14159"),
    (r"\text{(A)}", r"\text{(B)}"),
    ("1,001", "1000"),
    (r"x^2+1", r"(x+1)^2"),
    ("", "1"),
    ("-5", "5"),
]


def test_math_verify_decides_the_pairs_normalised_strings_cannot():
    """Intervals, radicals, expressions, sets and matrices are equal only symbolically: normalised strings and
    numbers say no, math-verify says yes (and the fallback alone would score these answers wrong)."""
    hard = [(c, r) for c, r in EQUAL if not math_strings_equal(normalize_math_answer(c), normalize_math_answer(r))]
    assert {r"\sqrt{8}", "(x+1)^2", r"\{3,2,1\}", "2, 1"} <= {r for _, r in hard}
    for candidate, reference in hard:
        assert symbolic_equal(candidate, reference) is True, (candidate, reference)
    for candidate, reference in DIFFERENT:
        assert symbolic_equal(candidate, reference) is not True, (candidate, reference)


@pytest.mark.parametrize(("candidate", "reference"), EQUAL)
def test_equal_answers_match(candidate, reference):
    assert math_answers_equal(candidate, reference), (candidate, reference)
    assert math_answers_equal(reference, candidate), (reference, candidate)


@pytest.mark.parametrize(("candidate", "reference"), DIFFERENT)
def test_different_answers_do_not_match(candidate, reference):
    assert not math_answers_equal(candidate, reference), (candidate, reference)


def test_unparsable_answers_fall_back_to_normalised_strings():
    assert symbolic_equal(r"\frac{1}{0", r"\frac{1}{0") is None  # math-verify cannot parse it
    assert math_answers_equal(r"\frac{1}{0", r"\frac{1}{0")  # equal strings still match
    assert math_answers_equal(r"\frac {1}{0 ", r"\dfrac{1}{0")  # after normalisation too
    assert not math_answers_equal(r"\frac{1}{0", r"\frac{2}{0")


def test_hydra_and_math_verify_share_antlr_4_9_3():
    assert version("antlr4-python3-runtime") == "4.9.3"
    assert OmegaConf.create({"a": "${b}", "b": 1}).a == 1  # OmegaConf's ANTLR grammar still works
    assert math_answers_equal(r"\dfrac{1}{2}", "0.5")
