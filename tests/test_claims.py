"""experiments/claims.py: the README's claims section is the script's output on the committed records,
and on simulated records the verdicts follow the truth (the paper right, the paper wrong, neither)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from mathneuro.report import claims as lib
from mathneuro.report.records import read_study, write_packed
from tests.conftest import load_experiment

claims = load_experiment("claims")
SEEDS = range(5)
SIZES = {"gsm8k_cot": 300, "mmlu": 570, "race": 300, "math500_local": 500, "mathqa_local": 500, "egsm_local": 300,
         "hellaswag_local": 500, "piqa_local": 500, "winogrande_local": 500, "mutual_local": 500, "wikitext_local": 62}
METRIC = {"gsm8k_cot": claims.STRICT, "math500_local": "math_verify", "egsm_local": "exact_match",
          "hellaswag_local": "acc_norm", "piqa_local": "acc_norm", "mutual_local": "r@1"}
BASE_ACC = {"gsm8k_cot": 0.52, "mmlu": 0.5, "race": 0.35, "math500_local": 0.3, "mathqa_local": 0.35,
            "egsm_local": 0.5, "hellaswag_local": 0.5, "piqa_local": 0.7, "winogrande_local": 0.6, "mutual_local": 0.5}


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
        n = SIZES[task]
        return [(f"mmlu_s{i % 57}", i // 57) for i in range(n)] if task == "mmlu" else list(range(n))

    def baseline(self, study: str, tasks: list[str]) -> None:
        body = {}
        for t in tasks:
            if t == "wikitext_local":
                body[t] = {k: [-1000.0 - 10 * k, 400.0] for k in self.keys(t)}
                continue
            self.base.setdefault(t, (self.rng.random(SIZES[t]) < BASE_ACC[t]).astype(float))
            body[t] = dict(zip(self.keys(t), self.base[t].tolist(), strict=True))
        self.write(study, "baseline-sim", {"kind": "baseline", "point": {"model": claims.MODEL}}, body)

    def answers(self, task: str, down: float, up: float) -> np.ndarray:
        u = np.where(self.rng.random(SIZES[task]) < 0.9, self.shared[task], self.rng.random(SIZES[task]))
        b = self.base[task]
        return np.where(b == 1, (u >= down).astype(float), (u < up).astype(float))

    def point(self, study: str, seed: int, flips: dict[str, tuple[float, float]], *, ppl_ratio: float = 1.0,
              selection: dict | None = None, **point) -> None:
        point = {"model": claims.MODEL, "task": "gsm8k", "num_samples": 100, "seed": seed, "scalar": 0.0,
                 "intervention": "prune", **point}
        body = {}
        for t, (down, up) in flips.items():
            if t == "wikitext_local":
                body[t] = {k: [-1000.0 - 10 * k - 400 * math.log(ppl_ratio) + self.rng.normal(0, 2), 400.0]
                           for k in self.keys(t)}
                continue
            body[t] = dict(zip(self.keys(t), self.answers(t, down, up).tolist(), strict=True))
        name = "__".join(f"{k}{point[k]}" for k in ("method", "filter", "top_k", "scalar", "seed")) + \
            (f"_{point['reference']}" if point.get("reference") else "")
        self.write(study, name, {"kind": "point", "point": point, "baseline": "baseline-sim", "selection": selection or {}},
                   body)

    def write(self, study: str, name: str, header: dict, body: dict) -> None:
        lines = []
        for task, recs in body.items():
            metric = METRIC.get(task, "word_perplexity" if task == "wikitext_local" else "acc")
            for key, value in recs.items():
                line = {"task": task, "doc_id": key[1] if isinstance(key, tuple) else key, metric: value}
                if isinstance(key, tuple):
                    line["subtask"] = key[0]
                lines.append(line)
        write_packed(self.root / study / f"{name}.jsonl.gz", {**header, "study": study, "name": name}, lines)


CORE = ["gsm8k_cot", "mmlu", "race"]


def simulate_prune(sim: Sim, *, m_nonmath: tuple[float, float]) -> None:
    """Random pruning costs a little everywhere; M destroys GSM8K and flips non-math as ``m_nonmath``."""
    sim.baseline("prune", CORE)
    upstream, blocks = claims.UPSTREAM[claims.MODEL]
    for seed in SEEDS:
        for k in (0.05, 0.15):
            for filt in ("race", "mmlu"):
                at = {"top_k": k, "filter": filt}
                sel = {"num_weights_edited": int(0.018 * upstream), "num_parameters": 1_777_088_000,
                       "per_layer": {str(b): 1000 + 40 * (b % 5) for b in range(blocks)}}
                sim.point("prune", seed, {"gsm8k_cot": (0.99, 0.0), "mmlu": m_nonmath, "race": m_nonmath},
                          method="mathneuro", selection=sel, **at)
                sim.point("prune", seed, {"gsm8k_cot": (0.3, 0.02), "mmlu": (0.03, 0.03), "race": (0.03, 0.03)},
                          method="random", **at)
        at = {"top_k": 0.15, "filter": "race"}
        sim.point("prune", seed, {t: (0.9, 0.05) for t in CORE}, method="wanda", **at)
        sim.point("prune", seed, {t: (0.88, 0.05) for t in CORE}, method="random", reference="wanda", **at)


def simulate_scale(sim: Sim, *, gain: float) -> None:
    """M scaling raises GSM8K and MATH by ``gain`` (absolute) and leaves MMLU / RACE almost untouched."""
    tasks = ["gsm8k_cot", "math500_local", "mmlu", "race"]
    sim.baseline("scale", tasks)
    up = {t: gain / (1 - BASE_ACC[t]) for t in ("gsm8k_cot", "math500_local")}
    for seed in SEEDS:
        at = {"intervention": "scale", "scalar": 1.1, "top_k": 0.05, "filter": "mmlu"}
        sim.point("scale", seed, {"gsm8k_cot": (0.0, up["gsm8k_cot"]), "math500_local": (0.0, up["math500_local"]),
                                  "mmlu": (0.01, 0.01), "race": (0.01, 0.01)}, method="mathneuro", **at)
        sim.point("scale", seed, {t: (0.01, 0.01) for t in tasks}, method="random", **at)


def simulate_generalisation(sim: Sim, *, nonmath: tuple[float, float], ppl_ratio: float) -> None:
    maths, others = ["math500_local", "mathqa_local", "egsm_local"], ["hellaswag_local", "piqa_local",
                                                                     "winogrande_local", "mutual_local"]
    sim.baseline("generalisation", [*maths, *others, "wikitext_local"])
    at = {"top_k": 0.15, "filter": "mmlu"}
    for seed in SEEDS:
        sim.point("generalisation", seed, {**{t: (0.95, 0.0) for t in maths}, **{t: nonmath for t in others},
                                           "wikitext_local": (0, 0)}, ppl_ratio=ppl_ratio, method="mathneuro", **at)
        sim.point("generalisation", seed, {**{t: (0.1, 0.02) for t in maths}, **{t: (0.03, 0.03) for t in others},
                                           "wikitext_local": (0, 0)}, method="random", **at)


def verdicts(root: Path) -> dict[str, str]:
    text = claims.build(root, resamples=1000)
    rows = [line for line in text.splitlines() if line.startswith("| ") and line[2:3].isdigit()]
    return {line.split(".")[0][2:]: line.rsplit("|", 2)[-2].strip(" *") for line in rows}


def test_where_the_paper_is_right_every_claim_is_reproduced(tmp_path: Path) -> None:
    sim = Sim(tmp_path)
    simulate_prune(sim, m_nonmath=(0.03, 0.03))   # M flips non-math like random: equivalent
    simulate_scale(sim, gain=0.10)
    simulate_generalisation(sim, nonmath=(0.03, 0.03), ppl_ratio=1.0)
    got = verdicts(tmp_path)
    assert got["1"] == got["2a"] == got["3"] == got["6"] == "reproduced", got
    assert got["4"].startswith("reproduced") and got["2b"] == "not testable here"
    assert got["5"].startswith("not run")


def test_where_the_paper_is_wrong_the_claims_are_not_reproduced(tmp_path: Path) -> None:
    sim = Sim(tmp_path, seed=1)
    simulate_prune(sim, m_nonmath=(0.40, 0.0))    # M costs non-math far more than random does
    simulate_scale(sim, gain=0.0)                 # no gain, and few answers move: shown below 4 %
    simulate_generalisation(sim, nonmath=(0.40, 0.0), ppl_ratio=1.5)
    got = verdicts(tmp_path)
    assert got["1"] == got["3"] == got["6"] == "not reproduced", got


def test_where_the_data_cannot_tell_the_verdict_is_inconclusive(tmp_path: Path) -> None:
    sim = Sim(tmp_path, seed=2)
    simulate_prune(sim, m_nonmath=(0.13, 0.03))   # M loses about 5 points more than random: at the margin
    got = verdicts(tmp_path)
    assert got["1"] == "inconclusive" and got["3"] == got["6"] == "not run", got


def test_holm_and_the_single_test_rules_on_hand_made_rows() -> None:
    t = lib.Test("x", "x", "1", "math", "x", "s", (), "random", ("t",), "acc", "direction", family="F")
    rows = [{"test": t, "status": "ok", "decision": lib.SUPPORTS, "holm": lib.SUPPORTS},
            {"test": t, "status": "ok", "decision": lib.SUPPORTS, "holm": lib.UNDECIDED}]
    assert lib.part_status(rows, adjusted=False) == "supported" and lib.part_status(rows) == "inconclusive"
    assert lib.part_status([*rows, {"test": t, "status": "not run"}], adjusted=False) == "incomplete"
    assert lib.claim_verdict(["supported", "contradicted"]) == "not reproduced"
    assert lib.claim_verdict(["not run", "not run"]) == "not run"


def test_the_searched_best_point_and_its_trace(tmp_path: Path) -> None:
    for i, (k, s, obj) in enumerate([(0.05, 1.1, 0.02), (0.01, 1.2, 0.08), (0.05, 1.2, 0.08), (0.15, 1.3, -1.2)]):
        write_packed(tmp_path / "scale_search" / f"p{i}.jsonl.gz", {
            "kind": "point", "name": f"p{i}", "objective": obj,
            "point": {"model": claims.MODEL, "method": "mathneuro", "intervention": "scale", "top_k": k, "scalar": s,
                      "seed": 0}, "metrics": {f"math/gsm8k_val/{claims.STRICT}": 0.5 + obj, "nonmath/mmlu_dev/acc": 0.5},
            "baseline_metrics": {f"math/gsm8k_val/{claims.STRICT}": 0.5, "nonmath/mmlu_dev/acc": 0.5}}, [])
    trace, best = claims.search_trace({"scale_search": read_study(tmp_path / "scale_search")})
    assert best == (0.01, 1.2) and len(trace) == 4  # a tie goes to the smaller K
    assert any(t.group == "3s" and dict(t.select)["top_k"] == 0.01 for t in claims.plan_tests(best))
    text = claims.build(tmp_path, resamples=200)
    assert "| 0.01 | 1.2 | 0.580 (0.500) | 0.500 (0.500) | +0.080 **best** |" in text


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
