"""Issue 32's scaling search: its validation split, its trace and its best point.

    python experiments/claims/scaling_search.py validation --data ../shared/data --out VAL.jsonl [--draws 0,1,2,3,4]
    python experiments/claims/scaling_search.py best SEARCH_DIR [--expect N]   # prints "TOP_K SCALAR" of the best trial
    python experiments/claims/scaling_search.py trace SEARCH_DIR --out TRACE.md [--csv TRACE.csv]

``validation`` writes GSM8K *train* questions that no identification draw of ``--draws`` uses (the bootstrap
draws of ``--num-samples`` records for each seed, as ``mathneuro.data.draw_samples`` makes them), the first
``--size`` of them in file order (``--order shuffle``: of a shuffle seeded by ``--seed``), to a .jsonl outside the
repository (the data may not be copied into it), with a sidecar ``.json`` naming the source, the excluded
indices' count and the kept indices. The search scores K and s on these questions, never on GSM8K test, so the test
stays untouched.

``best`` reads every trial of a search folder (an Optuna study or an explicit grid: each point's
``results.json``) and prints the top_k and scalar of the highest objective (ties: the smaller K, then s).
``trace`` writes every trial in the order it ran: top_k, scalar, the validation metrics, the objective.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import json
import math
import random
import sys
from pathlib import Path

import yaml

from mathneuro.data import draw_samples, read_jsonl


def validation_indices(num_records: int, draws: list[int], num_samples: int, size: int,
                       seed: int | None) -> tuple[list[int], set[int]]:
    """(kept indices, excluded indices): ``size`` indices of ``range(num_records)`` drawn by no identification draw:
    the first ``size`` in file order (``seed`` None), else the first ``size`` of a shuffle seeded by ``seed``."""
    used: set[int] = set()
    for draw in draws:
        used.update(draw_samples(num_records, num_samples, draw, bootstrap=True))
    free = [i for i in range(num_records) if i not in used]
    if seed is not None:
        random.Random(seed).shuffle(free)
    if size > len(free):
        raise ValueError(f"--size {size}: only {len(free)} GSM8K train records are outside the identification draws")
    return sorted(free[:size]), used


def write_validation(data: Path, out: Path, draws: list[int], num_samples: int, size: int, seed: int | None) -> dict:
    """Write the validation .jsonl and its sidecar; return the sidecar's content."""
    source = data / "gsm8k" / "train.jsonl"
    records = read_jsonl(source)
    kept, used = validation_indices(len(records), draws, num_samples, size, seed)
    out.parent.mkdir(parents=True, exist_ok=True)
    lines = [json.dumps({"question": records[i]["question"], "answer": records[i]["answer"]}) for i in kept]
    out.write_text("\n".join(lines) + "\n")
    meta = {"source": str(source), "num_records": len(records), "draws": draws, "num_samples": num_samples,
            "excluded": len(used), "size": size, "seed": seed, "indices": kept,
            "sha256": hashlib.sha256(out.read_bytes()).hexdigest()}
    out.with_suffix(".json").write_text(json.dumps(meta, indent=1) + "\n")
    return meta


def trials(folder: Path) -> list[dict]:
    """Every complete point under ``folder``, in the order its sweep ran them (Hydra's job number)."""
    rows = []
    for path in sorted(folder.glob("*/results.json")):
        data = json.loads(path.read_text())
        if data.get("status") != "complete":
            continue
        hydra_file = path.parent / ".hydra" / "hydra.yaml"
        num = None
        if hydra_file.is_file():
            num = ((yaml.safe_load(hydra_file.read_text()) or {}).get("hydra") or {}).get("job", {}).get("num")
        point = data.get("point") or {}
        row = {"trial": num, "top_k": point.get("top_k"), "scalar": point.get("scalar"),
               "objective": data.get("objective"),
               "num_selected": (data.get("selection") or {}).get("num_selected")}
        for name, value in (data.get("metrics") or {}).items():
            if not name.endswith("_stderr"):
                row[name] = value
                row[f"baseline/{name}"] = (data.get("baseline_metrics") or {}).get(name)
        row["job"] = path.parent.name
        rows.append(row)
    rows.sort(key=lambda r: (r["trial"] is None, r["trial"] if r["trial"] is not None else 0, r["job"]))
    return rows


def best(rows: list[dict]) -> dict:
    """The trial with the highest finite objective; among equals the smaller K, then the smaller s."""
    scored = [r for r in rows if isinstance(r["objective"], (int, float)) and math.isfinite(r["objective"])]
    if not scored:
        raise ValueError("no trial with a finite objective")
    return min(scored, key=lambda r: (-r["objective"], float(r["top_k"]), float(r["scalar"])))


def _fmt(value) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return "" if value is None else str(value)


def trace_markdown(rows: list[dict]) -> str:
    """The trace as a markdown table, the best trial marked."""
    if not rows:
        return "(no complete trial)\n"
    winner = best(rows)
    metrics = [k for k in rows[0] if "/" in k and not k.startswith("baseline/")]
    head = ["trial", "top_k", "scalar", "num_selected", *metrics, "objective", "best"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [_fmt(r.get(h)) for h in head[:-1]] + (["**best**"] if r is winner else [""])
        lines.append("| " + " | ".join(cells) + " |")
    base = {m: rows[0].get(f"baseline/{m}") for m in metrics}
    lines.append("")
    lines.append("Unedited: " + ", ".join(f"{m} = {_fmt(v)}" for m, v in base.items()))
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    v = sub.add_parser("validation")
    v.add_argument("--data", required=True)
    v.add_argument("--out", required=True)
    v.add_argument("--draws", default="0,1,2,3,4", help="identification seeds whose draws are excluded")
    v.add_argument("--num-samples", type=int, default=100)
    v.add_argument("--size", type=int, default=300)
    v.add_argument("--order", choices=("file", "shuffle"), default="file",
                   help="file: the first --size free questions in file order; shuffle: a shuffle seeded by --seed")
    v.add_argument("--seed", type=int, default=32)
    b = sub.add_parser("best")
    b.add_argument("folder")
    b.add_argument("--expect", type=int, default=None, help="refuse (exit 2) while fewer trials are complete")
    t = sub.add_parser("trace")
    t.add_argument("folder")
    t.add_argument("--out", required=True)
    t.add_argument("--csv", default=None)
    args = p.parse_args(argv)
    try:
        if args.cmd == "validation":
            draws = [int(d) for d in str(args.draws).split(",") if d != ""]
            seed = args.seed if args.order == "shuffle" else None
            meta = write_validation(Path(args.data), Path(args.out), draws, args.num_samples, args.size, seed)
            print(f"{args.out}: {meta['size']} GSM8K train questions, none of the {meta['excluded']} records "
                  f"drawn by seeds {draws} (N = {args.num_samples})")
        elif args.cmd == "best":
            rows = trials(Path(args.folder))
            if args.expect is not None and len(rows) < args.expect:
                raise ValueError(f"{args.folder}: {len(rows)} of {args.expect} trials complete; "
                                 "finish the search first")
            r = best(rows)
            print(f"{round(float(r['top_k']), 4)} {round(float(r['scalar']), 4)}")
        else:
            rows = trials(Path(args.folder))
            Path(args.out).parent.mkdir(parents=True, exist_ok=True)
            Path(args.out).write_text(trace_markdown(rows))
            if args.csv and rows:
                keys = list(dict.fromkeys(k for r in rows for k in r))
                with open(args.csv, "w", newline="") as fh:
                    w = csv.DictWriter(fh, fieldnames=keys)
                    w.writeheader()
                    w.writerows(rows)
            print(f"{args.out}: {len(rows)} trial(s)")
    except (OSError, ValueError, KeyError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
