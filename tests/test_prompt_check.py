"""The paired report never pairs different prompts: records of one example whose prompt hashes differ are refused."""

from __future__ import annotations

import json
from pathlib import Path

from mathneuro.report import paired
from tests.records_sweeps import GSM, RACE, lose, records_sweep, write_point, write_samples


def stamp_prompts(folder: Path, task: str, prompt: str) -> None:
    """Give every record of ``folder/<task>.jsonl`` the prompt hash of ``prompt`` + its doc id."""
    from mathneuro.evaluation.samples import hash_text

    path = folder / f"{task}.jsonl"
    records = [json.loads(line) for line in path.read_text().splitlines()]
    path.write_text("".join(json.dumps({**r, "prompt_hash": hash_text(f"{prompt}{r['doc_id']}")}) + "\n"
                            for r in records))


def sweep(root: Path, random_prompt: str) -> Path:
    records_sweep(root, ("mathneuro", "mathneuro", 0, {"gsm": lose(GSM, 5), "race": RACE}),
                  ("random", "random", 0, {"gsm": lose(GSM, 1), "race": lose(RACE, 2)}))
    for folder in ("baseline_samples", "mathneuro/samples", "random/samples"):
        stamp_prompts(root / folder, "gsm8k", "Q: 5-shot ")
        stamp_prompts(root / folder, "race", random_prompt if folder.startswith("random") else "Article: ")
    return root


def test_records_with_the_same_prompts_are_paired(tmp_path: Path) -> None:
    rep = paired.paired_report(sweep(tmp_path, "Article: "), resamples=200)
    pairs = {(r["method"], r["reference"], r["task"]) for r in rep.rows}
    assert ("mathneuro", "random", "race") in pairs and ("mathneuro", "random", "gsm8k") in pairs
    assert not [n for n in rep.notes if "refused" in n]


def test_records_whose_prompts_differ_are_refused_with_one_line_naming_task_and_points(tmp_path: Path) -> None:
    rep = paired.paired_report(sweep(tmp_path, "Passage: "), resamples=200)
    pairs = {(r["method"], r["reference"], r["task"]) for r in rep.rows}
    assert ("mathneuro", "random", "race") not in pairs  # never silently paired
    assert ("random", "baseline", "race") not in pairs  # the random point saw other prompts than the baseline too
    assert ("mathneuro", "random", "gsm8k") in pairs and ("mathneuro", "baseline", "race") in pairs  # the rest stands
    refused = [n for n in rep.notes if "refused" in n]
    assert len(refused) == 2 and all("\n" not in n for n in refused)
    line = next(n for n in refused if "with random" in n)
    assert line.startswith("task race: refused to pair mathneuro with random: the prompts differ on 40 of 40")
    assert any(n.startswith("task race: refused to pair random with the unedited model") for n in refused)


def test_records_without_prompt_hashes_are_paired_as_before(tmp_path: Path) -> None:
    write_samples(tmp_path / "baseline_samples", GSM, RACE)
    write_point(tmp_path, "mathneuro", "mathneuro", 0, {"gsm": lose(GSM, 5), "race": RACE})
    rep = paired.paired_report(tmp_path, resamples=200)
    assert {(r["reference"], r["task"]) for r in rep.rows} == {("baseline", "gsm8k"), ("baseline", "race")}
