"""The claims table's two guards: one kind of machine per comparison (unless the plan names the pairing), and
decisions that do not hinge on the bootstrap's seed ("at the margin" within the Monte Carlo error)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from claimslib import claims as lib
from claimslib import mcerror
from claimslib.records import Packed

from mathneuro.report.machines import Machine, allowed, kind_key, parse_pairings
from tests.test_claims import AT, CORE, EPYC, XEON, Sim, claims, verdicts

XEON_KIND, EPYC_KIND = "Intel(R) Xeon(R) Processor (amx_bf16+avx512_bf16)", "AMD EPYC (avx512_bf16)"


def test_a_kind_of_machine_is_its_name_and_cpu_kernel_flags_never_invented() -> None:
    assert kind_key(XEON) == XEON_KIND and kind_key(EPYC) == EPYC_KIND
    assert kind_key({"device": "cpu", "device_name": "AMD EPYC"}) == "AMD EPYC (CPU flags not recorded)"
    assert kind_key({"device": "cuda:0", "device_name": "NVIDIA H100", "cuda": "12.4"}) == "NVIDIA H100"
    assert kind_key(None) is None and kind_key({}) is None
    noted = Machine(kind_key(EPYC), "noted, not recorded")
    assert noted.label == f"{EPYC_KIND}, noted, not recorded" and Machine(None, "not recorded").label == "not recorded"
    assert allowed([], "1a", noted, Machine(EPYC_KIND)) and not allowed([], "1a", Machine(None), Machine(None))


def test_a_plan_names_cross_kind_pairings_in_a_fenced_block() -> None:
    plan = ("# Plan\n\n## Amendments\n\n- **2026-12-08** pairing\n\n```cross-kind-pairings\n"
            f'[{{"tests": ["1a", "1c"], "kinds": ["{XEON_KIND}", "{EPYC_KIND}"], "amendment": "2026-12-08"}}]\n```\n')
    (pairing,) = parse_pairings(plan)
    xeon, epyc = Machine(XEON_KIND), Machine(EPYC_KIND)
    assert allowed([pairing], "1a", epyc, xeon) and allowed([pairing], "1c", xeon, epyc)
    assert not allowed([pairing], "1d", xeon, epyc)  # a test the block does not name
    assert parse_pairings("# Plan without a block\n") == []
    with pytest.raises(ValueError, match="two \"kinds\""):
        parse_pairings('```cross-kind-pairings\n[{"tests": ["1a"], "kinds": ["x"]}]\n```\n')


def _simulate_mixed_prune(sim: Sim) -> None:
    """Claim 1 as the paper has it, except that random's draw 0 ran on another kind of machine."""
    sim.baseline("prune", CORE)
    for seed in range(3):
        sim.point("prune", seed, {"gsm8k_cot": (0.99, 0.0), "mmlu": (0.03, 0.03), "race": (0.03, 0.03)},
                  method="mathneuro", **AT)
        sim.point("prune", seed, {"gsm8k_cot": (0.3, 0.02), "mmlu": (0.03, 0.03), "race": (0.03, 0.03)},
                  method="random", header={"hardware": EPYC} if seed == 0 else None, **AT)


def test_a_comparison_mixing_machine_kinds_is_refused_unless_the_plan_names_the_pairing(tmp_path: Path) -> None:
    sim = Sim(tmp_path / "records")
    _simulate_mixed_prune(sim)
    plan = tmp_path / "ANALYSIS_PLAN.md"
    plan.write_text("# Plan\n")
    got = verdicts(tmp_path / "records", plan=plan)
    assert got["1"] == "not judged: mixes machine kinds (across kinds it read: reproduced)", got
    text = claims.build(tmp_path / "records", resamples=300, plan=plan)
    assert "Cross-kind pairings the plan names (a `cross-kind-pairings` block of ANALYSIS_PLAN.md): none." in text
    assert (f"- 1a[K0.15 mmlu] (M − random, GSM8K, gsm8k_cot): mixes machine kinds: draw 0: {XEON_KIND} / "
            f"{EPYC_KIND}. Across kinds: supports (adjusted: supports).") in text
    assert "1b[K0.15 mmlu] (" not in text.split("#### Every test")[0]  # M against the baseline: one kind
    assert "| refused (across kinds: supports) | refused (across kinds: supports) |" in text
    plan.write_text("# Plan\n\n```cross-kind-pairings\n"
                    f'[{{"tests": ["1a", "1c", "1d"], "kinds": ["{EPYC_KIND}", "{XEON_KIND}"]}}]\n```\n')
    assert verdicts(tmp_path / "records", plan=plan)["1"] == "reproduced"


def _direction_tree(mu: float, n: int = 200, sd: float = 0.1) -> tuple[lib.Test, dict]:
    """Two draws whose per-example differences are ``mu + sd * z`` (z standardised exactly): a pure bootstrap
    direction test (continuous values: no Newcombe hull) whose p-value sits where ``mu`` puts it."""
    z = np.random.default_rng(0).standard_normal(n)
    d = mu + sd * (z - z.mean()) / z.std()
    study = []
    for seed in range(2):
        for method, values in (("mathneuro", 0.5 + d), ("random", np.full(n, 0.5))):
            header = {"kind": "point", "point": {"model": "m", "method": method, "seed": seed, "top_k": 0.1,
                                                 "intervention": "prune", "filter": "f"}, "hardware": XEON}
            study.append(Packed(f"{method}{seed}", header, {"t": {i: {"acc": float(v)} for i, v in enumerate(values)}}))
    test = lib.Test("x", "x", "9", "p", "x", "s", (("method", "mathneuro"),), "random", ("t",), "acc", "direction",
                    expect="higher", family="F9")
    return test, {"s": study}


def test_a_decision_within_its_monte_carlo_error_of_alpha_reads_at_the_margin() -> None:
    edge = 1.96 * 0.1 / np.sqrt(200)  # the mean difference whose two-sided p is about 0.05
    test, tree = _direction_tree(edge)
    row = lib.adjust_families([lib.evaluate_test(test, tree, resamples=1000)])[0]
    (s_lo, _), (s_hi, _) = row["p_range"]
    assert s_lo < 0.05 < s_hi and s_lo <= row["p_support"] <= s_hi
    assert row["decision"] == row["holm"] == lib.AT_MARGIN
    assert lib.part_status([row]) == lib.AT_MARGIN and lib.claim_verdict([lib.AT_MARGIN, "supported"]) == lib.AT_MARGIN
    assert lib.claim_verdict([lib.AT_MARGIN, "contradicted"]) == "not reproduced"
    far = lib.adjust_families([lib.evaluate_test(_direction_tree(2 * edge)[0], _direction_tree(2 * edge)[1],
                                                 resamples=1000)])[0]
    assert far["decision"] == far["holm"] == lib.SUPPORTS
    decided = {lib.evaluate_test(test, tree, resamples=1000, seed=s)["p_support"] <= 0.05 for s in range(8)}
    assert decided == {True, False}  # the seed alone decides it: what "at the margin" says


def test_monte_carlo_errors_of_ends_and_counts() -> None:
    stats = np.arange(10_000) / 10_000
    lo, hi = mcerror.quantile_range(stats, 0.025)
    assert lo < 0.025 < hi and hi - lo == pytest.approx(2 * 1.96 * np.sqrt(10_000 * 0.025 * 0.975) / 10_000, abs=3e-4)
    low, high = mcerror.count_interval(0, 10_000)
    assert low == 0 and 0 < high < 4e-4  # p = 0 of B resamples still carries an error
