"""Pack a sweep's per-example records into the committed layout (``experiments/records/<study>/``).

    .venv/bin/python experiments/claims/pack_records.py --study prune outputs/sweeps/claims32/prune
    .venv/bin/python experiments/claims/pack_records.py --study data_efficiency \
        --table experiments/results/claims_1p5b/data_efficiency_mmlu/data_efficiency.csv --name mmlu_filter

Each complete point with records (``eval.log_samples=true``) becomes ``<point>.jsonl.gz`` (its
results.json essentials, then one line per evaluated example, numbers only), each distinct unedited
baseline ``baseline-<hash>.jsonl.gz``; the layout is :mod:`claimslib.records`. Packing is
deterministic (same runs, same bytes), so rerunning it after a resumed sweep only adds files.
``experiments/claims/claims.py`` reads nothing else.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from claimslib.records import pack_sweep, pack_table

RECORDS = Path(__file__).resolve().parents[1] / "records"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sweeps", nargs="*", help="sweep dirs (or run dirs) whose points to pack")
    parser.add_argument("--study", required=True, help="the study's folder name under --out, e.g. prune")
    parser.add_argument("--out", default=str(RECORDS), help="records root (default: %(default)s)")
    parser.add_argument("--table", default=None, help="pack this CSV as a table file instead (needs --name)")
    parser.add_argument("--name", default=None, help="the table file's name")
    args = parser.parse_args(argv)
    folder = Path(args.out) / args.study
    if args.table:
        if not args.name:
            print("error: --table needs --name", file=sys.stderr)
            return 2
        written = [pack_table(args.table, folder, study=args.study, name=args.name)]
    else:
        missing = [s for s in args.sweeps if not Path(s).is_dir()]
        if not args.sweeps or missing:
            print(f"error: no such sweep dir: {', '.join(missing) or '(none given)'}", file=sys.stderr)
            return 2
        written = pack_sweep(args.sweeps, folder, study=args.study)
    size = sum(p.stat().st_size for p in written)
    for path in written:
        print(f"wrote {path} ({path.stat().st_size / 1024:.1f} KiB)")
    print(f"{len(written)} file(s), {size / 1024:.1f} KiB in {folder}")
    return 0 if written else 1


if __name__ == "__main__":
    sys.exit(main())
