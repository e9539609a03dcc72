"""The confirmatory amendment's fresh examples: test examples no committed record has used, in a seeded order.

    # write experiments/confirm/examples.json
    .venv/bin/python experiments/data/confirm_examples.py list  [--data ../shared/data]
    # exit 1 if it differs from a recomputation
    .venv/bin/python experiments/data/confirm_examples.py check [--data ../shared/data]
    # a data folder holding only them
    .venv/bin/python experiments/data/confirm_examples.py build --out DIR [--data ...]

ANALYSIS_PLAN.md, amendment of 2026-12-07 (confirmatory). For each evaluated set (GSM8K test, RACE-high test
articles, each MMLU subject's test questions, each MATH subject's test problems) the *used* examples are the
doc ids of that set in every committed record under ``experiments/records/`` (packed ``*.jsonl.gz`` and the raw
baseline tarballs); the *fresh* ones are all others. They are sorted by their index in the file, shuffled with
``random.Random(f"{SEED}:{set}")`` and the first ``SIZES[set]`` are chosen. The amendment's own records
(``records/confirm*/``) are not "committed records" here: their doc ids index the fresh lists. The list is a choice made
before any run (nothing about the model is read), so it is committed with the amendment.

``build`` writes a folder laid out like ``../shared/data`` whose test files hold the chosen examples in the
chosen order (every other file is a link to the source folder's), so the evaluation's "first n" is the
chosen list and a record's ``doc_id`` i is ``chosen[i]`` of its set in ``examples.json``.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import os
import random
import re
import sys
import tarfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
RECORDS = HERE.parent / "records"
OUT = HERE.parent / "confirm" / "examples.json"
SEED = 20261207
#: how many fresh examples each set contributes (MMLU and MATH: per subject), fixed by the amendment
SIZES = {"gsm8k": 200, "race": 400, "mmlu": 20, "math": 35}
MATH_TYPES = {"algebra": "Algebra", "counting_and_prob": "Counting & Probability", "geometry": "Geometry",
              "intermediate_algebra": "Intermediate Algebra", "num_theory": "Number Theory",
              "prealgebra": "Prealgebra", "precalc": "Precalculus"}


def _lines(path: Path) -> list[str]:
    return [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def sets(data: Path) -> dict[str, dict]:
    """Every set the amendment draws from: file, record task / subtask names and the indices of its examples."""
    out = {"gsm8k": {"file": "gsm8k/test.jsonl", "task": "gsm8k_cot", "subtask": None, "size": SIZES["gsm8k"],
                     "n": len(_lines(data / "gsm8k/test.jsonl"))},
           "race": {"file": "race/test_high_by_article.jsonl", "task": "race", "subtask": None, "size": SIZES["race"],
                    "n": len(_lines(data / "race/test_high_by_article.jsonl"))}}
    for path in sorted((data / "mmlu/by_subject").glob("*_test.jsonl")):
        subject = path.name[: -len("_test.jsonl")]
        out[f"mmlu/{subject}"] = {"file": f"mmlu/by_subject/{path.name}", "task": "mmlu", "subtask": f"mmlu_{subject}",
                                  "size": SIZES["mmlu"], "n": len(_lines(path))}
    types = [json.loads(line)["type"] for line in _lines(data / "math/test.jsonl")]
    for slug, name in MATH_TYPES.items():
        out[f"math/{slug}"] = {"file": "math/test.jsonl", "where": {"type": name}, "task": "minerva_math",
                               "subtask": f"minerva_math_{slug}", "size": SIZES["math"], "n": types.count(name)}
    return out


def _sample_ids(lines, task: str | None, used: dict) -> None:
    for line in lines:
        row = json.loads(line)
        if isinstance(row, dict) and "doc_id" in row:
            used.setdefault((row.get("task", task), row.get("subtask")), set()).add(int(row["doc_id"]))


def _earlier(records: Path, pattern: str) -> list[Path]:
    """The record files of the earlier plans: this amendment's own (``confirm*/``, whose doc ids index the fresh
    lists, not the files) are left out, so the lists stay the same after its records are committed."""
    return [p for p in sorted(records.glob(pattern)) if not p.relative_to(records).parts[0].startswith("confirm")]


def used_ids(records: Path = RECORDS) -> dict[tuple[str, str | None], set[int]]:
    """``{(task, subtask): doc ids}`` over every committed record: packed files and raw baseline tarballs."""
    used: dict = {}
    for path in _earlier(records, "**/*.jsonl.gz"):
        with gzip.open(path, "rt", encoding="utf-8") as fh:
            _sample_ids(list(fh)[1:], None, used)
    for path in _earlier(records, "**/*.tar.gz"):
        with tarfile.open(path) as tar:
            for member in tar.getmembers():
                name = Path(member.name)
                if not member.isfile() or name.suffix != ".jsonl":
                    continue
                task = name.parent.name  # <task>/<task or subtask>.jsonl
                subtask = None if name.stem == task else name.stem
                lines = tar.extractfile(member).read().decode("utf-8").splitlines()
                rows = [json.loads(line) for line in lines if line.strip()]
                for row in rows:
                    if "doc_id" in row:
                        used.setdefault((task, row.get("subtask", subtask)), set()).add(int(row["doc_id"]))
    return used


def _used_for(spec: dict, used: dict) -> set[int]:
    """A set's used ids; a record without a subtask name covers the whole set only where the set has none."""
    return set(used.get((spec["task"], spec["subtask"]), set()))


def choose(data: Path, records: Path = RECORDS) -> dict:
    """The amendment's example lists: per set, the fresh ids in seeded order, the first ``size`` chosen."""
    used = used_ids(records)
    out = {}
    for name, spec in sets(data).items():
        taken = _used_for(spec, used)
        fresh = sorted(set(range(spec["n"])) - taken)
        random.Random(f"{SEED}:{name}").shuffle(fresh)
        chosen = fresh[: spec["size"]]
        if len(chosen) < spec["size"]:
            raise SystemExit(f"error: {name}: only {len(fresh)} fresh examples, {spec['size']} wanted")
        entry = {k: v for k, v in spec.items() if k != "size"}
        entry.update(used=len(taken), fresh=len(fresh), chosen=chosen,
                     sha256=hashlib.sha256(json.dumps(chosen).encode()).hexdigest())
        out[name] = entry
    whole = hashlib.sha256(json.dumps({k: v["chosen"] for k, v in out.items()}, sort_keys=True).encode()).hexdigest()
    return {"seed": SEED, "sizes": SIZES, "sha256": whole, "sets": out}


def _link_tree(src: Path, dst: Path, replaced: set[str]) -> None:
    """Mirror ``src`` into ``dst`` with links, except the files in ``replaced`` (relative paths) and their folders."""
    for path in sorted(src.rglob("*")):
        rel = path.relative_to(src).as_posix()
        if path.is_dir() or rel in replaced:
            continue
        target = dst / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        if not target.exists():
            target.symlink_to(path.resolve())


def build(data: Path, out: Path, lists: dict) -> Path:
    """Write the data folder of the chosen examples (see the module's docstring); returns ``out``."""
    by_file: dict[str, list[str]] = {}
    for name, entry in lists["sets"].items():
        lines = _lines(data / entry["file"])
        if entry.get("where"):
            lines = [line for line in lines if all(json.loads(line).get(k) == v for k, v in entry["where"].items())]
        if len(lines) != entry["n"]:
            raise SystemExit(f"error: {name}: {entry['file']} has {len(lines)} examples, the list was made for "
                             f"{entry['n']}")
        by_file.setdefault(entry["file"], []).extend(lines[i] for i in entry["chosen"])
    out.mkdir(parents=True, exist_ok=True)
    for rel, lines in by_file.items():
        (out / rel).parent.mkdir(parents=True, exist_ok=True)
        (out / rel).write_text("\n".join(lines) + "\n", encoding="utf-8")
    _link_tree(data, out, set(by_file))
    (out / "CONFIRM_EXAMPLES").write_text(lists["sha256"] + "\n", encoding="utf-8")
    return out


def _dump(lists: dict) -> str:
    text = json.dumps(lists, indent=1, sort_keys=True)
    return re.sub(r"\[\s+([0-9,\s]+?)\s+\]", lambda m: "[" + re.sub(r"\s+", " ", m.group(1)) + "]", text) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=("list", "check", "build"))
    parser.add_argument("--data", default=os.environ.get("DATA", str(HERE.parents[2] / "shared" / "data")),
                        help="the shared data folder (default: $DATA, else ../shared/data)")
    parser.add_argument("--records", default=str(RECORDS), help="committed records (default: %(default)s)")
    parser.add_argument("--lists", default=str(OUT), help="the committed lists (default: %(default)s)")
    parser.add_argument("--out", help="build: the folder to write")
    args = parser.parse_args(argv)
    data = Path(args.data)
    if not data.is_dir():
        print(f"error: no data folder {data} (give --data)", file=sys.stderr)
        return 2
    if args.action == "build":
        if not args.out:
            print("error: build needs --out", file=sys.stderr)
            return 2
        print(build(data, Path(args.out), json.loads(Path(args.lists).read_text())))
        return 0
    lists = _dump(choose(data, Path(args.records)))
    if args.action == "list":
        Path(args.lists).parent.mkdir(parents=True, exist_ok=True)
        Path(args.lists).write_text(lists)
        print(f"wrote {args.lists}")
        return 0
    if Path(args.lists).read_text() != lists:
        print(f"error: {args.lists} differs from the lists recomputed from {data} and {args.records}", file=sys.stderr)
        return 1
    print(f"ok: {args.lists} is the recomputed list")
    return 0


if __name__ == "__main__":
    sys.exit(main())
