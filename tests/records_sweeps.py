"""Hand-made sweeps with per-example records (gsm8k and race), for the paired report and what reads its records."""

from __future__ import annotations

import json
from pathlib import Path

GSM = [float(i % 3 != 0) for i in range(30)]      # unedited: 20 of 30 correct
RACE = [float(i % 2) for i in range(40)]          # unedited: 20 of 40 correct


def write_samples(folder: Path, gsm: list[float], race: list[float], *, docs: range | None = None) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    with (folder / "gsm8k.jsonl").open("w") as f:
        for i, v in enumerate(gsm):
            f.write(json.dumps({"doc_id": i, "exact_match,strict-match": v, "answer": "42"}) + "\n")
    with (folder / "race.jsonl").open("w") as f:
        for i, v in enumerate(race):
            if docs is None or i in docs:
                f.write(json.dumps({"doc_id": i, "acc": v}) + "\n")


def lose(values: list[float], n: int) -> list[float]:
    """``values`` with the first ``n`` correct answers turned wrong."""
    out, left = list(values), n
    for i, v in enumerate(out):
        if left and v == 1.0:
            out[i], left = 0.0, left - 1
    return out


def write_point(root: Path, name: str, method: str, seed: int, samples: dict | None, *, filt: str = "race",
                **extra: str) -> None:
    job = root / name
    (job / ".hydra").mkdir(parents=True)
    point = {"model": "tiny", "task": "gsm8k", "filter": filt, "method": method, "top_k": 0.05,
             "intervention": "prune", "scalar": 0.0, "seed": seed, "num_samples": 10, **extra}
    result = {"status": "complete", "point": point, "metrics": {"math/gsm8k/exact_match,strict-match": 0.5},
              "baseline_metrics": {"math/gsm8k/exact_match,strict-match": 2 / 3}}
    if samples is not None:
        write_samples(job / "samples", samples["gsm"], samples["race"], docs=samples.get("docs"))
        result["samples"] = {"dir": "samples", "baseline_dir": "../baseline_samples",
                             "tasks": {"gsm8k": "math", "race": "nonmath"}}
    (job / "results.json").write_text(json.dumps(result))


def records_sweep(root: Path, *points: tuple) -> Path:
    """A sweep folder under ``root``: the unedited model's records (:data:`GSM`, :data:`RACE`) and one job per
    ``(name, method, seed, samples)`` or ``(name, method, seed, samples, {write_point's keywords})``."""
    write_samples(root / "baseline_samples", GSM, RACE)
    for name, method, seed, samples, *keywords in points:
        write_point(root, name, method, seed, samples, **(keywords[0] if keywords else {}))
    return root
