"""The claims table under the confirmatory amendment (ANALYSIS_PLAN.md, 2026-12-07 (confirmatory); issue 53): claims
1, 4, 5 and test 6d from records/confirm as its machine-readable block says, beside the amended plan's verdicts;
cross-kind pairings from either place a plan names them, each for its own records; and plan_precedes_records
checks that every line under records/confirm came after the confirmatory amendment."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
from claimslib.confirm import confirm_tree, read_amendment
from claimslib.overlap_records import overlap_shares, write_overlap_record
from claimslib.records import read_study, write_packed

from mathneuro.report.machines import parse_pairings
from tests.conftest import load_experiment
from tests.test_claims import AT, CORE, EPYC, SIZES, Sim, _commit, claims, simulate_generalisation
from tests.test_claims_rules import EPYC_KIND, XEON_KIND
from tests.test_overlap_records import POINT, tiny

PLAN = claims.PLAN.read_text()
BLOCK = json.loads(re.search(r"<!-- confirmatory:begin -->\s*```json\n(.*?)```", PLAN, re.S).group(1))
DRAWS = (100, 101, 102, 103)
RESAMPLES = 300


def plan(tmp_path: Path, *, pairings: list | None = None, fenced: str = "") -> Path:
    """A plan whose confirmatory block is the real one with the simulated records' sizes (the table reads sizes
    from the block) and, optionally, cross-kind pairings in the block or a fenced block."""
    block = json.loads(json.dumps(BLOCK))
    block["sizes"] = {t: SIZES[t] for t in block["sizes"]}
    block["machine_kind"]["cross_kind_pairings"] = pairings or []
    path = tmp_path / "ANALYSIS_PLAN.md"
    path.write_text(f"# Plan\n\n{fenced}<!-- confirmatory:begin -->\n```json\n{json.dumps(block, indent=1)}\n```\n"
                    "<!-- confirmatory:end -->\n")
    return path


def confirm_lines(text: str) -> dict[str, str]:
    """``{claim: its confirmatory line}`` of the built section."""
    section = text.split("#### The confirmatory amendment", 1)[1].split("####", 1)[0]
    return {m.group(1): m.group(0) for m in re.finditer(r"^- \*\*Claim (\d)\*\* \(confirmatory.*$", section, re.M)}


def verdict(line: str) -> str:
    found = re.search(r"\): \*\*(.*?)\*\*", line)
    return found.group(1) if found else line.split("): ", 1)[1]


def simulate_confirm_prune(sim: Sim, *, epyc_random: int | None = None) -> None:
    """Claim 1 on draws 100-103: M leaves about 10 % of GSM8K right (below 0.20 × unedited, about 0.10 ×) and flips
    non-math like random; a seed-0 point that the amendment does not name (and that would contradict) is ignored."""
    sim.baseline("prune", CORE)
    for seed in DRAWS:
        sim.point("prune", seed, {"gsm8k_cot": (0.9, 0.0), "mmlu": (0.03, 0.03), "race": (0.03, 0.03)},
                  method="mathneuro", **AT)
        sim.point("prune", seed, {"gsm8k_cot": (0.3, 0.02), "mmlu": (0.03, 0.03), "race": (0.03, 0.03)},
                  method="random", header={"hardware": EPYC} if seed == epyc_random else None, **AT)
    sim.point("prune", 0, {"gsm8k_cot": (0.0, 0.0), "mmlu": (0.5, 0.0), "race": (0.5, 0.0)}, method="mathneuro", **AT)


def simulate_confirm_identification(root: Path, share: float = 0.019, draws: tuple[int, ...] = DRAWS) -> None:
    """Claim 4: inside the plan's band [1.2, 2.1] %, outside the paper's 1.5-1.8 %; draw 0 (not the amendment's) far
    outside both."""
    upstream, blocks = claims.UPSTREAM[claims.MODEL]
    for seed in (*draws, 0):
        for filt in ("race", "mmlu"):
            sel = {"num_weights_edited": int((share if seed else 0.05) * upstream), "num_parameters": 1_777_088_000,
                   "per_layer": {str(b): 1000 + 40 * (b % 5) for b in range(blocks)}}
            point = {"model": claims.MODEL, "method": "mathneuro", "top_k": 0.15, "filter": filt, "seed": seed,
                     "intervention": "prune", "num_samples": 100}
            write_packed(root / "identification" / f"m-{filt}-{seed}.jsonl.gz",
                         {"kind": "point", "study": "identification", "name": f"m-{filt}-{seed}", "point": point,
                          "selection": sel}, [])


def simulate_confirm_pairs(root: Path, draws: tuple[int, ...] = DRAWS) -> Path:
    folder = root / "data_efficiency" / "pairs"
    keeps = {1: 0.3, 10: 0.7, 100: 0.95}
    sels = {(n, s): tiny(1000 * n + s, keep) for n, keep in keeps.items() for s in draws}
    for n in keeps:
        for i, a in enumerate(draws):
            for b in draws[i + 1:]:
                write_overlap_record(folder, {**POINT, "num_samples": n}, "M", ({"seed": a}, sels[(n, a)]),
                                     ({"seed": b}, sels[(n, b)]))
    return folder


def test_the_amendments_block_is_read_not_copied() -> None:
    am = read_amendment(PLAN)
    assert am.seeds["claim1"] == DRAWS and am.seeds["6d"] == (100, 101) and am.sizes["minerva_math"] == 245
    assert (am.decides_1b, am.reported_1b) == (0.20, (0.10,)) and am.bands == {"plan": (1.2, 2.1), "paper": (1.5, 1.8)}
    tests = {t.id: t for t in claims.confirm_tests(am)}
    assert tests["1b (confirm)"].factor == 0.20 and tests["1b @ 0.10 (confirm)"].role == "reported"
    assert tests["1c (confirm)"].min_n == 400 and tests["6d MATH (confirm)"].min_n == 245
    assert tests["6d MATH (confirm)"].family is None  # one test, no family to adjust
    assert read_amendment("# a plan without the block\n") is None
    with pytest.raises(ValueError, match="confirmatory block.*seeds"):
        read_amendment('<!-- confirmatory:begin -->\n```json\n{"id": "x", "records": "r"}\n```\n'
                       "<!-- confirmatory:end -->\n")


def test_until_records_confirm_exists_each_claim_is_one_not_run_line(tmp_path: Path) -> None:
    text = claims.build(tmp_path / "records", resamples=RESAMPLES, plan=plan(tmp_path))
    lines = confirm_lines(text)
    assert sorted(lines) == ["1", "4", "5", "6"] and all(line.endswith("not run (no records under "
                                                                       f"`experiments/records/confirm/{study}`).")
                                                         for line, study in zip(
                                                             (lines[c] for c in "1456"),
                                                             ("prune", "identification", "data_efficiency/pairs",
                                                              "generalisation"), strict=True))
    assert "| 1a (confirm)" not in text and "confirmatory (amendment" not in text  # no wall of rows


def test_confirmatory_claims_1_4_5_and_6d_beside_the_amended_plans(tmp_path: Path) -> None:
    records = tmp_path / "records"
    main, confirm = Sim(records), Sim(records / "confirm", seed=1)
    simulate_generalisation(main, nonmath=(0.03, 0.03), ppl_ratio=1.0)  # the amended plan's 6d: M breaks MATH
    simulate_confirm_prune(confirm)
    simulate_confirm_identification(confirm.root)
    simulate_confirm_pairs(confirm.root)
    confirm.baseline("generalisation", ["minerva_math"])
    for seed in (100, 101):  # the fresh 6d: M keeps nearly all of MATH, above t = -0.5 × unedited
        confirm.point("generalisation", seed, {"minerva_math": (0.05, 0.0)}, method="mathneuro", **AT)
    text = claims.build(records, resamples=RESAMPLES, plan=plan(tmp_path))
    lines = confirm_lines(text)

    assert verdict(lines["1"]) == "reproduced", lines["1"]  # draw 0's contradicting point is not the amendment's
    assert "1b decided at 0.20 × unedited" in lines["1"]
    assert "M's GSM8K accuracy vs 0.10 × unedited (reported, not decided): inconclusive" in lines["1"]
    assert "| 1b @ 0.10 (confirm) | M's GSM8K accuracy vs 0.10 × unedited (reported, not decided) |" in text
    assert "The amended plan's: not run. They differ" in lines["1"]

    assert verdict(lines["4"]) == "reproduced", lines["4"]
    assert "decided on the plan's band [1.2, 2.1] % of the upstream parameters: share supported" in lines["4"]
    assert "against the paper's band [1.5, 1.8] % (reported, not decided): share contradicted" in lines["4"]
    assert "4 draws: 1.90–1.90 % of upstream" in lines["4"]  # draw 0 (5 %) is not read

    shares = overlap_shares(read_study(confirm.root / "data_efficiency" / "pairs"), POINT)
    assert f"M at N = 1 / 10 / 100: {shares[(1, 'M')]['share']:.2f}" in lines["5"]
    assert "(pairs of draws: 6 / 6 / 6)" in lines["5"] and "rebuilt from the committed per-matrix" in lines["5"]

    assert re.search(r"Claim 6\*\* \(confirmatory: test 6d on 154 fresh MATH problems, draws 100, 101", lines["6"])
    assert verdict(lines["6"]) == "not reproduced", lines["6"]  # the fresh 6d contradicts
    assert "6d: contradicts" in lines["6"] and "The amended plan's: reproduced. They differ" in lines["6"]
    head = [line for line in text.splitlines() if line.startswith("- **Claim 6** (§5.6")][0]
    assert "reproduced; confirmatory (amendment of 2026-12-07): **not reproduced**" in head


def test_a_stage_with_fewer_draws_or_pairs_than_planned_is_not_judged(tmp_path: Path) -> None:
    confirm = Sim(tmp_path / "records" / "confirm")
    confirm.baseline("prune", CORE)
    for seed in DRAWS[:3]:
        for method in ("mathneuro", "random"):
            confirm.point("prune", seed, {t: (0.03, 0.03) for t in CORE}, method=method, **AT)
    simulate_confirm_pairs(confirm.root, DRAWS[:3])
    simulate_confirm_identification(confirm.root, draws=DRAWS[:3])
    text = claims.build(tmp_path / "records", resamples=RESAMPLES, plan=plan(tmp_path))
    lines = confirm_lines(text)
    assert verdict(lines["1"]) == "incomplete" and "| not judged: 3 of the amendment's 4 draws |" in text
    assert verdict(lines["5"]) == "incomplete" and "fewer than the 6 pairs of draws at N = [1, 10, 100]" in lines["5"]
    assert verdict(lines["4"]) == "incomplete" and "fewer than the 4 draws of the mmlu, race filter" in lines["4"]


def test_cross_kind_pairings_come_from_either_block_and_govern_their_own_records(tmp_path: Path) -> None:
    entry = {"tests": ["1a", "1b", "1c", "1d", "1ctx"], "kinds": [XEON_KIND, EPYC_KIND], "amendment": "x"}
    fenced = f"```cross-kind-pairings\n{json.dumps([entry])}\n```\n\n"
    confirm = Sim(tmp_path / "records" / "confirm")
    simulate_confirm_prune(confirm, epyc_random=100)
    # the amendment names none: the fenced block's pairing (the amended plan's records) does not reach confirm
    none = plan(tmp_path, fenced=fenced)
    assert [p.records for p in parse_pairings(none.read_text(), None)] == ["experiments/records"]
    assert verdict(confirm_lines(claims.build(tmp_path / "records", resamples=RESAMPLES, plan=none))["1"]) == \
        "not judged: mixes machine kinds (across kinds it read: reproduced)"
    named = plan(tmp_path, pairings=[entry])
    (pairing,) = parse_pairings(named.read_text(), "experiments/records/confirm")
    assert pairing.amendment == "x" and parse_pairings(named.read_text()) == []
    assert verdict(confirm_lines(claims.build(tmp_path / "records", resamples=RESAMPLES, plan=named))["1"]) == \
        "reproduced"
    assert confirm_tree(tmp_path / "records", read_amendment(named.read_text()))["prune"]


@pytest.mark.integration  # git in a subprocess
def test_every_line_under_records_confirm_follows_the_confirmatory_amendment(tmp_path: Path) -> None:
    check = load_experiment("claims/plan_precedes_records")
    root = tmp_path / "repo"
    folder = root / "experiments" / "records" / "confirm" / "prune"
    folder.mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    plan_path = root / "experiments" / "ANALYSIS_PLAN.md"
    plan_path.write_text("# Plan\n\n## Amendments\n\n- **2026-12-06: the plan fitted** (before any run). A.\n")
    _commit(root, "plan")
    (folder / "early.jsonl.gz").write_bytes(b"x")
    _commit(root, "a confirm record before its amendment")
    assert check.check("2026-12-06", root)[1] == ["experiments/records/confirm/prune/early.jsonl.gz"]
    plan_path.write_text(plan_path.read_text() + "- **2026-12-07 (confirmatory): claims again** (before its data).\n")
    _commit(root, "the confirmatory amendment")
    (folder / "late.jsonl.gz").write_bytes(b"y")
    (root / "experiments" / "records" / "prune").mkdir(parents=True)
    (root / "experiments" / "records" / "prune" / "plan.jsonl.gz").write_bytes(b"z")
    _commit(root, "records after it")
    lines, bad = check.check("2026-12-06", root)
    assert bad == ["experiments/records/confirm/prune/early.jsonl.gz"]
    assert any("before the amendment of 2026-12-06 or the confirmatory one" in line for line in lines)
    assert any("confirm/prune/late.jsonl.gz" in line and "BEFORE" not in line for line in lines)
