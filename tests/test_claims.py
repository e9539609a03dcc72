"""experiments/claims/claims.py: the README's claims section is the script's output on the committed records,
and on simulated records the verdicts follow the truth (the paper right, the paper wrong, neither)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from claimslib import claims as lib
from claimslib.records import read_tree, write_packed

from tests.conftest import load_experiment

claims = load_experiment("claims/claims")
#: The largest size of each task over the amended plan's claims (the baseline's); records' task names.
SIZES = {t: max(sizes.get(t, 0) for sizes in claims.SIZES.values()) for t in
         sorted({t for sizes in claims.SIZES.values() for t in sizes})}
METRIC = {"gsm8k_cot": claims.STRICT, "minerva_math": "math_verify", "egsm": claims.STRICT,
          "hellaswag": "acc_norm", "piqa": "acc_norm", "mutual": "r@1"}
BASE_ACC = {"gsm8k_cot": 0.52, "mmlu": 0.5, "race": 0.35, "minerva_math": 0.3, "mathqa": 0.35,
            "egsm": 0.5, "hellaswag": 0.5, "piqa": 0.7, "winogrande": 0.6, "mutual": 0.5}
SUBTASKS = {"mmlu": 57, "minerva_math": 7}  # pooled groups: records keyed (subtask, doc_id), the first n per subject
#: The machine every simulated record was computed on (a comparison pairs one kind of machine).
XEON = {"device": "cpu", "device_name": "Intel(R) Xeon(R) Processor", "cpu_flags": ["amx_bf16", "avx512_bf16"],
        "dtype": "bfloat16", "threads": 1}
EPYC = {"device": "cpu", "device_name": "AMD EPYC", "cpu_flags": ["avx512_bf16"], "dtype": "bfloat16", "threads": 1}


def test_the_tests_name_tasks_as_the_evaluation_path_names_their_records(tmp_path: Path) -> None:
    """Every task a claim test reads is the name the records carry: ``Harness.display_name`` of the task's
    own lm-eval task (local twin or stock). A rename on either side breaks this."""
    from mathneuro.evaluation.config import EvalConfig
    from mathneuro.evaluation.harness import Harness
    from mathneuro.evaluation.task_table import TASKS

    harness = Harness(None, None, EvalConfig(tasks=list(SIZES)), tmp_path)
    names = {t for test in claims.plan_tests() for t in test.tasks}
    assert names == set(SIZES)
    for task in names:
        assert task in TASKS, task
        assert harness.display_name(task, harness.lm_eval_name(task)) == task
        for subtask in ("anatomy", "algebra"):  # a group's leaves are named under the task, as the Sim keys them
            leaf = f"{harness.lm_eval_name(task)}_{subtask}"
            assert harness.display_name(task, leaf).startswith(task)


@pytest.mark.e2e
def test_every_test_reads_a_metric_its_task_reports(tmp_path: Path) -> None:
    """Each test's metric is one its task's lm-eval config makes (``metric_list`` × filters, as results and
    records name them), under our local twin and the stock task alike: a test that names a metric the
    evaluation never writes reads "not run" after its points have run (EGSM's ``exact_match`` did)."""
    from mathneuro.evaluation.task_metrics import reported_metrics
    from mathneuro.evaluation.task_table import TASKS

    for test in claims.plan_tests():
        for task in test.tasks:
            for data_dir in (tmp_path, None) if TASKS[task].stock else (tmp_path,):  # local twin, stock task
                assert test.metric in reported_metrics(task, data_dir), (test.id, task, data_dir, test.metric)
    for task, metric in METRIC.items():  # the simulated records below use the same names
        assert metric in reported_metrics(task, tmp_path), (task, metric)


def test_the_readme_section_is_the_scripts_output_on_the_committed_records() -> None:
    assert claims.readme_section(claims.README.read_text()) == claims.build().strip("\n")


class Sim:
    """Writes packed records of one simulated experiment: an unedited baseline per study, and edited
    points whose answers flip from the baseline's with given probabilities (shared by the draws for
    most examples, as the same questions break under every draw)."""

    def __init__(self, root: Path, seed: int = 0) -> None:
        self.root, self.rng = root, np.random.default_rng(seed)
        self.base: dict[str, np.ndarray] = {}
        self.shared = {t: self.rng.random(n) for t, n in SIZES.items()}

    def keys(self, task: str) -> list:
        n, groups = SIZES[task], SUBTASKS.get(task)
        return [(f"{task}_s{i % groups}", i // groups) for i in range(n)] if groups else list(range(n))

    def baseline(self, study: str, tasks: list[str], **header: object) -> None:
        body = {}
        for t in tasks:
            if t == "wikitext":
                body[t] = {k: [-1000.0 - 10 * k, 400.0] for k in self.keys(t)}
                continue
            self.base.setdefault(t, (self.rng.random(SIZES[t]) < BASE_ACC[t]).astype(float))
            body[t] = dict(zip(self.keys(t), self.base[t].tolist(), strict=True))
        self.write(study, "baseline-sim", {"kind": "baseline", "point": {"model": claims.MODEL}, "tasks": tasks,
                                           "hardware": XEON, **header}, body)

    def answers(self, task: str, down: float, up: float) -> np.ndarray:
        u = np.where(self.rng.random(SIZES[task]) < 0.9, self.shared[task], self.rng.random(SIZES[task]))
        b = self.base[task]
        return np.where(b == 1, (u >= down).astype(float), (u < up).astype(float))

    def point(self, study: str, seed: int, flips: dict[str, tuple[float, float]], *, ppl_ratio: float = 1.0,
              selection: dict | None = None, header: dict | None = None, **point) -> None:
        point = {"model": claims.MODEL, "task": "gsm8k", "num_samples": 100, "seed": seed, "scalar": 0.0,
                 "intervention": "prune", **point}
        body = {}
        for t, (down, up) in flips.items():
            if t == "wikitext":
                body[t] = {k: [-1000.0 - 10 * k - 400 * math.log(ppl_ratio) + self.rng.normal(0, 2), 400.0]
                           for k in self.keys(t)}
                continue
            body[t] = dict(zip(self.keys(t), self.answers(t, down, up).tolist(), strict=True))
        name = "__".join(f"{k}{point[k]}" for k in ("method", "filter", "top_k", "scalar", "seed")) + \
            (f"_{point['reference']}" if point.get("reference") else "")
        self.write(study, name, {"kind": "point", "point": point, "baseline": "baseline-sim",
                                 "selection": selection or {}, "hardware": XEON, **(header or {})}, body)

    def write(self, study: str, name: str, header: dict, body: dict) -> None:
        lines = []
        for task, recs in body.items():
            metric = METRIC.get(task, "word_perplexity" if task == "wikitext" else "acc")
            for key, value in recs.items():
                line = {"task": task, "doc_id": key[1] if isinstance(key, tuple) else key, metric: value}
                if isinstance(key, tuple):
                    line["subtask"] = key[0]
                lines.append(line)
        write_packed(self.root / study / f"{name}.jsonl.gz", {**header, "study": study, "name": name}, lines)


CORE = ["gsm8k_cot", "mmlu", "race"]
AT = {"top_k": 0.15, "filter": "mmlu"}


def simulate_prune(sim: Sim, *, m_nonmath: tuple[float, float]) -> None:
    """Random pruning costs a little everywhere; M destroys GSM8K and flips non-math as ``m_nonmath``
    (claim 1, draws 0-2); Wanda hurts everything (claim 2, draws 0-1)."""
    sim.baseline("prune", CORE)
    for seed in range(3):
        sim.point("prune", seed, {"gsm8k_cot": (0.99, 0.0), "mmlu": m_nonmath, "race": m_nonmath},
                  method="mathneuro", **AT)
        sim.point("prune", seed, {"gsm8k_cot": (0.3, 0.02), "mmlu": (0.03, 0.03), "race": (0.03, 0.03)},
                  method="random", **AT)
    for seed in range(2):
        sim.point("prune", seed, {t: (0.9, 0.05) for t in CORE}, method="wanda", **AT)


def simulate_identification(sim: Sim, share: float = 0.018) -> None:
    """Claim 4: M's size and spread at K = 15 %, both filters, draws 0-2; claim 5: M's overlap table."""
    upstream, blocks = claims.UPSTREAM[claims.MODEL]
    for seed in range(3):
        for filt in ("race", "mmlu"):
            sel = {"num_weights_edited": int(share * upstream), "num_parameters": 1_777_088_000,
                   "per_layer": {str(b): 1000 + 40 * (b % 5) for b in range(blocks)}}
            point = {"model": claims.MODEL, "method": "mathneuro", "top_k": 0.15, "filter": filt, "seed": seed,
                     "intervention": "prune", "num_samples": 100}
            write_packed(sim.root / "identification" / f"m-{filt}-{seed}.jsonl.gz",
                         {"kind": "point", "study": "identification", "name": f"m-{filt}-{seed}", "point": point,
                          "selection": sel}, [])


def simulate_scale(sim: Sim, *, gain: float, nonmath: tuple[float, float] = (0.002, 0.002)) -> None:
    """M scaling raises GSM8K and MATH by ``gain`` (absolute) and leaves MMLU / RACE almost untouched."""
    tasks = ["gsm8k_cot", "minerva_math", "mmlu", "race"]
    sim.baseline("scale", tasks)
    up = {t: (0.0, gain / (1 - BASE_ACC[t])) if gain >= 0 else (-gain / BASE_ACC[t], 0.0)
          for t in ("gsm8k_cot", "minerva_math")}
    for seed in range(2):
        at = {"intervention": "scale", "scalar": 1.1, "top_k": 0.05, "filter": "mmlu"}
        sim.point("scale", seed, {"gsm8k_cot": up["gsm8k_cot"], "minerva_math": up["minerva_math"],
                                  "mmlu": nonmath, "race": nonmath}, method="mathneuro", **at)


def simulate_generalisation(sim: Sim, *, nonmath: tuple[float, float], ppl_ratio: float) -> None:
    maths, others = ["minerva_math", "mathqa", "egsm"], ["hellaswag", "piqa", "winogrande", "mutual"]
    sim.baseline("generalisation", [*maths, *others, "wikitext"])
    for seed in range(2):
        sim.point("generalisation", seed, {**{t: (0.95, 0.0) for t in maths}, **{t: nonmath for t in others},
                                           "wikitext": (0, 0)}, ppl_ratio=ppl_ratio, method="mathneuro", **AT)
        sim.point("generalisation", seed, {**{t: (0.1, 0.02) for t in maths}, **{t: (0.03, 0.03) for t in others},
                                           "wikitext": (0, 0)}, method="random", **AT)


def verdicts(root: Path, plan: Path | None = None) -> dict[str, str]:
    text = claims.build(root, resamples=1000, plan=plan or claims.PLAN)
    rows = [line for line in text.splitlines() if line.startswith("| ") and line[2:3].isdigit()]
    return {line.split(".")[0][2:]: line.rsplit("|", 2)[-2].strip(" *") for line in rows}


def simulate_overlap(sim: Sim, shares: tuple[float, float, float]) -> None:
    rows = [{"model": claims.MODEL, "task": "gsm8k", "filter": "mmlu", "top_k": 0.15, "num_samples": n, "seeds": 3,
             "pairs": 3, "a_in_b_mean": share} for n, share in zip((1, 10, 100), shares, strict=True)]
    write_packed(sim.root / "data_efficiency" / f"{claims.AMENDED_TABLE}.jsonl.gz",
                 {"kind": "table", "study": "data_efficiency", "name": claims.AMENDED_TABLE}, rows)


def test_where_the_paper_is_right_every_claim_is_reproduced(tmp_path: Path) -> None:
    sim = Sim(tmp_path)
    simulate_prune(sim, m_nonmath=(0.03, 0.03))   # M flips non-math like random: equivalent
    simulate_identification(sim)
    simulate_overlap(sim, (0.75, 0.9, 0.96))
    simulate_scale(sim, gain=0.12)
    simulate_generalisation(sim, nonmath=(0.03, 0.03), ppl_ratio=1.0)
    got = verdicts(tmp_path)
    assert got["1"] == got["2"] == got["3"] == got["6"] == "reproduced", got
    assert got["4"].startswith("reproduced") and got["5"].startswith("reproduced")
    assert got["2 (LAPE)"] == "not testable here"


def test_where_the_paper_is_wrong_the_claims_are_not_reproduced(tmp_path: Path) -> None:
    sim = Sim(tmp_path, seed=1)
    simulate_prune(sim, m_nonmath=(0.40, 0.0))    # M costs non-math far more than random does
    simulate_identification(sim, share=0.05)      # M is 5 % of the model
    simulate_overlap(sim, (0.3, 0.5, 0.7))
    simulate_scale(sim, gain=0.0, nonmath=(0.3, 0.0))  # no gain, and non-math moves
    simulate_generalisation(sim, nonmath=(0.40, 0.0), ppl_ratio=1.5)
    got = verdicts(tmp_path)
    assert got["1"] == got["3"] == got["6"] == "not reproduced", got
    assert got["4"].startswith("not reproduced") and got["5"].startswith("not reproduced")


def test_claim_3s_math_part_cannot_be_contradicted_at_the_amended_sizes(tmp_path: Path) -> None:
    sim = Sim(tmp_path, seed=4)
    simulate_scale(sim, gain=-0.05)  # the edit even costs math: the plan still only says "not supported"
    rows = {r["test"].group: r for r in claims.evaluate(claims.plan_tests(), read_tree(tmp_path), resamples=500)
            if r["test"].claim == "3" and r["status"] == "ok"}
    assert rows["3a"]["p_contra"] == 1.0 and rows["3a"]["decision"] == lib.UNDECIDED
    assert lib.part_status([rows["3a"], rows["3b"]]) == "inconclusive"


def test_where_the_data_cannot_tell_the_verdict_is_inconclusive(tmp_path: Path) -> None:
    sim = Sim(tmp_path, seed=2)
    simulate_prune(sim, m_nonmath=(0.13, 0.03))   # M loses about 5 points more than random: at the margin
    got = verdicts(tmp_path)
    assert got["1"] == "inconclusive" and got["3"] == got["6"] == "not run", got


def test_holm_only_on_the_contradicting_side_of_an_intersection_union_part() -> None:
    def row(role: str, p_support: float, p_contra: float) -> dict:
        t = lib.Test("x", "x", "1", "math", "x", "s", (), "random", ("t",), "acc", "direction", family=role,
                     role=role)
        return {"test": t, "status": "ok", "p_support": p_support, "p_contra": p_contra}

    primary = lib.adjust_families([row("primary", 0.04, 1.0), row("primary", 0.03, 1.0)])
    assert [r["holm"] for r in primary] == [lib.SUPPORTS, lib.SUPPORTS]  # Holm would have left 0.04 at 0.08
    contra = lib.adjust_families([row("primary", 1.0, 0.04), row("primary", 1.0, 0.03)])
    assert [r["holm"] for r in contra] == [lib.UNDECIDED, lib.UNDECIDED]  # Holm: 0.06 and 0.08
    secondary = lib.adjust_families([row("secondary", 0.04, 1.0), row("secondary", 0.03, 1.0)])
    assert [r["holm"] for r in secondary] == [lib.UNDECIDED, lib.UNDECIDED]


def test_holm_and_the_single_test_rules_on_hand_made_rows() -> None:
    t = lib.Test("x", "x", "1", "math", "x", "s", (), "random", ("t",), "acc", "direction", family="F")
    rows = [{"test": t, "status": "ok", "decision": lib.SUPPORTS, "holm": lib.SUPPORTS},
            {"test": t, "status": "ok", "decision": lib.SUPPORTS, "holm": lib.UNDECIDED}]
    assert lib.part_status(rows, adjusted=False) == "supported" and lib.part_status(rows) == "inconclusive"
    assert lib.part_status([*rows, {"test": t, "status": "not run"}], adjusted=False) == "incomplete"
    one_draw = {"test": t, "status": "not judged: one draw", "decision": None, "holm": None}
    assert lib.part_status([one_draw, {"test": t, "status": "not run"}]) == "incomplete"  # it has run, not far enough
    assert lib.part_status([{"test": t, "status": "not run"}]) == "not run"
    assert lib.claim_verdict(["supported", "contradicted"]) == "not reproduced"
    assert lib.claim_verdict(["not run", "not run"]) == "not run"


def test_write_and_check_the_readme(tmp_path: Path, monkeypatch) -> None:
    readme = tmp_path / "README.md"
    readme.write_text(f"# x\n\n{claims.BEGIN}\nold\n{claims.END}\n\nrest\n")
    assert claims.write_readme("new table", readme) and not claims.write_readme("new table", readme)
    assert readme.read_text() == f"# x\n\n{claims.BEGIN}\nnew table\n{claims.END}\n\nrest\n"
    monkeypatch.setattr(claims, "README", readme)
    assert claims.main(["--records", str(tmp_path / "none"), "--check"]) == 1
    assert claims.main(["--records", str(tmp_path / "none"), "--write"]) == 0
    assert claims.main(["--records", str(tmp_path / "none"), "--check"]) == 0
    with pytest.raises(ValueError, match="claims:begin"):
        claims.readme_section("no markers")


def test_claim_5_waits_for_two_draws_at_every_n(tmp_path: Path) -> None:
    # claim 1's N = 100 selections finish one point at a time: with one draw there is no overlap at N = 100 yet
    sim = Sim(tmp_path)
    simulate_overlap(sim, (0.75, 0.9, None))
    assert verdicts(tmp_path)["5"].startswith("not run")
    assert "M at N = 1 / 10 / 100: 0.75 / 0.90 / —" in claims.build(tmp_path, resamples=100)


def test_the_table_names_the_machines_its_records_were_computed_on(tmp_path: Path) -> None:
    """Each record's kind of machine: flags where recorded, "CPU flags not recorded" where not (never invented),
    "noted, not recorded" where noted after the run, "not recorded" where nothing is."""
    sim = Sim(tmp_path)
    bare = {"device": "cpu", "device_name": "Intel(R) Xeon(R) Processor", "dtype": "bfloat16", "threads": 1}
    sim.baseline("prune", CORE, hardware=None, task_hardware={"gsm8k_cot": bare, "mmlu": {**EPYC, "noted": "stop 47"}})
    sim.point("prune", 0, {"gsm8k_cot": (0.9, 0.0)}, method="mathneuro", **AT)
    line = claims.hardware_line(read_tree(tmp_path))
    assert "Intel(R) Xeon(R) Processor (CPU flags not recorded), bfloat16: 1 record(s) (unedited gsm8k_cot)" in line
    assert "AMD EPYC (avx512_bf16), noted, not recorded, bfloat16: 1 record(s) (unedited mmlu)" in line
    assert "Intel(R) Xeon(R) Processor (amx_bf16+avx512_bf16), bfloat16: 1 record(s) (prune/methodmathneuro__" in line
    assert "not recorded: 1 record(s) (unedited race)" in line
    assert line in claims.build(tmp_path, resamples=100)


def test_the_table_names_the_code_its_records_were_computed_with(tmp_path: Path) -> None:
    """Every number traces to its code: each point's and unedited task's git commit (``provenance``)."""
    sim = Sim(tmp_path)
    code = {"version": "0.2.0", "git": {"commit": "0123456789abcdef", "dirty": False}}
    sim.baseline("prune", CORE, task_provenance={"gsm8k_cot": {**code, "git": {"commit": "fedcba9876543210",
                                                                                  "dirty": True}}})
    sim.point("prune", 0, {"gsm8k_cot": (0.9, 0.0)}, method="mathneuro", header={"provenance": code}, **AT)
    sim.point("prune", 0, {"gsm8k_cot": (0.0, 0.0)}, method="random", header={"provenance": {"version": "0.2.0"}}, **AT)
    line = claims.code_line(read_tree(tmp_path))
    assert "0123456789: 1 record(s) (prune/methodmathneuro__filtermmlu__top_k0.15__scalar0.0__seed0)" in line
    assert "fedcba9876+dirty: 1 record(s) (unedited gsm8k_cot)" in line
    assert "mathneuro 0.2.0 (no git checkout): 1 record(s) (prune/methodrandom__" in line
    assert "not recorded: 2 record(s) (unedited mmlu, unedited race)" in line
    assert line in claims.build(tmp_path, resamples=100)


def _commit(root: Path, message: str) -> None:
    import subprocess

    subprocess.run(["git", "-C", str(root), "add", "-A"], check=True)
    subprocess.run(["git", "-C", str(root), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", message],
                   check=True)


@pytest.mark.integration  # git in a subprocess
def test_a_record_committed_before_the_governing_amendment_is_named(tmp_path: Path) -> None:
    """experiments/claims/plan_precedes_records.py reads the order from git: plan, amendment, then records."""
    import subprocess

    check = load_experiment("claims/plan_precedes_records")
    root = tmp_path / "repo"
    (root / "experiments" / "records" / "prune").mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    plan = root / "experiments" / "ANALYSIS_PLAN.md"
    plan.write_text("# Plan\n\n## Amendments\n\n- **2026-12-05** (no governed result existed). A change.\n")
    early = root / "experiments" / "records" / "prune" / "early.jsonl.gz"
    early.write_bytes(b"x")
    _commit(root, "plan, and a record too early")
    plan.write_text(plan.read_text() + "- **2026-12-06: the plan fitted** (before any run). Sizes.\n")
    _commit(root, "amendment")
    (root / "experiments" / "records" / "prune" / "late.jsonl.gz").write_bytes(b"y")
    _commit(root, "a record")
    assert check.has_history(root)
    lines, bad = check.check("2026-12-06", root)
    assert bad == ["experiments/records/prune/early.jsonl.gz"]
    assert [line.split(":")[0] for line in lines[:2]] == [
        "amendment 2026-12-05 '(no governed result existed). A change.'", "amendment 2026-12-06 'the plan fitted'"]
    assert any("late.jsonl.gz" in line and "BEFORE" not in line for line in lines)
    with pytest.raises(ValueError, match="2026-12-09"):
        check.check("2026-12-09", root)


@pytest.mark.integration  # git in a subprocess
def test_every_line_a_record_gains_is_checked_against_every_amendment_of_the_date(tmp_path: Path) -> None:
    """A record grows after its first commit: each commit that added a (decompressed) line is checked, and every
    amendment of the governing date must precede it; later amendments list what had been committed before them."""
    import gzip
    import subprocess

    check = load_experiment("claims/plan_precedes_records")
    root = tmp_path / "repo"
    folder = root / "experiments" / "records" / "prune"
    folder.mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    plan = root / "experiments" / "ANALYSIS_PLAN.md"

    def record(name: str, *lines: str) -> None:
        (folder / name).write_bytes(gzip.compress("".join(f"{x}\n" for x in lines).encode(), mtime=0))

    plan.write_text("# Plan\n\n## Amendments\n\n- **2026-12-06: first** (before any run). A.\n")
    record("grown.jsonl.gz", "header", "example 1")  # one line before the second amendment of the date
    _commit(root, "plan, first amendment, a record")
    plan.write_text(plan.read_text() + "- **2026-12-06: second** (before any run). B.\n")
    _commit(root, "second amendment of the date")
    record("grown.jsonl.gz", "header", "example 1", "example 2")
    record("late.jsonl.gz", "header")
    _commit(root, "the record grows; another record")
    record("late.jsonl.gz", "header", "example 1")
    plan.write_text(plan.read_text() + "- **2026-12-07: later** (some records seen). C.\n")
    _commit(root, "a later amendment")
    assert [n for _, n in check.line_commits(root, "experiments/records/prune/grown.jsonl.gz")] == [2, 1]
    lines, bad = check.check("2026-12-06", root)
    assert bad == ["experiments/records/prune/grown.jsonl.gz"]  # its first commit predates the second amendment
    assert any(line.startswith("    2 line(s) added in ") for line in lines)
    assert any("late.jsonl.gz" in line and "+1 later commit(s)" in line and "BEFORE" not in line for line in lines)
    assert lines[-1] == "before amendment 2026-12-07 'later': governed records with lines committed then: prune (2)"
    assert check.check("2026-12-06", root, under=("scale",))[1] == []


@pytest.mark.integration  # git in a subprocess
def test_every_committed_record_of_this_repository_follows_the_amendment_of_2026_12_06() -> None:
    check = load_experiment("claims/plan_precedes_records")
    if not check.has_history():
        pytest.skip("no full git history (a shallow clone or an export)")
    _lines, bad = check.check("2026-12-06")
    assert bad == []
