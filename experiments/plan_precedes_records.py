"""Check, from git history, that the analysis plan's governing amendment was committed before every record.

    .venv/bin/python experiments/plan_precedes_records.py [--since 2026-12-06]

Lists each dated amendment of ``experiments/ANALYSIS_PLAN.md`` with the commit that added it, and each
committed record under ``experiments/records/`` with the commit that first added it. A record the claims
table reads (every file but the context-only tables in ``CONTEXT``) must have been added in a descendant
of the commit that added the amendment dated ``--since`` (the plan fitted to this machine, issue 40);
exit status 1 names any that was not, 2 when the history is not there (a shallow clone, an export).
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
PLAN = "experiments/ANALYSIS_PLAN.md"
RECORDS = "experiments/records"
# records the claims table shows as context only (claims.py: the issue-16 overlap table predates the plan)
CONTEXT = ("experiments/records/data_efficiency/qwen2_5_coder_1_5b__mmlu.jsonl.gz",)
AMENDMENT = re.compile(r"^- \*\*(\d{4}-\d{2}-\d{2})(.*?)\*\*")


def git(root: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True, text=True).stdout


def has_history(root: Path = ROOT) -> bool:
    """True in a full clone (the plan's first commit and every record's are reachable)."""
    try:
        return git(root, "rev-parse", "--is-shallow-repository").strip() == "false"
    except (OSError, subprocess.CalledProcessError):
        return False


def amendments(root: Path = ROOT) -> list[tuple[str, str, str]]:
    """``(date, title, commit that added its line)`` for every dated amendment, in the plan's order."""
    out = []
    section = (root / PLAN).read_text().split("## Amendments", 1)[-1]
    for line in section.splitlines():
        match = AMENDMENT.match(line)
        if match:
            added = git(root, "log", "--format=%H", "-S", line.strip(), "--", PLAN).split()
            title = match.group(2).strip(" :") or line[match.end():].strip()
            out.append((match.group(1), title, added[-1] if added else ""))
    return out


def records(root: Path = ROOT) -> list[tuple[str, str]]:
    """``(path, commit that first added it)`` for every record file committed now."""
    paths = git(root, "ls-files", "--", RECORDS).split()
    return [(p, (git(root, "log", "--diff-filter=A", "--format=%H", "--", p).split() or [""])[-1]) for p in paths]


def check(since: str, root: Path = ROOT) -> tuple[list[str], list[str]]:
    """(report lines, violations): each amendment's and record's commit; records added before ``since``'s."""
    found = amendments(root)
    governing = [c for date, _, c in found if date == since and c]
    if not governing:
        raise ValueError(f"no committed amendment dated {since} in {PLAN}")
    first = governing[0]

    def when(commit: str) -> str:
        return git(root, "show", "-s", "--format=%ad", "--date=iso", commit).strip() if commit else "(not committed)"

    lines = [f"amendment {date} {title[:70]!r}: {c[:10]} {when(c)}" for date, title, c in found]
    bad = []
    for path, commit in records(root):
        governed = path not in CONTEXT
        ok = bool(commit) and subprocess.run(["git", "-C", str(root), "merge-base", "--is-ancestor", first, commit],
                                             capture_output=True).returncode == 0
        lines.append(f"{'governed' if governed else 'context '} {path[len(RECORDS) + 1:]}: {commit[:10]} {when(commit)}"
                     f"{'' if ok or not governed else '  <- BEFORE THE AMENDMENT'}")
        if governed and not ok:
            bad.append(path)
    return lines, bad


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--since", default="2026-12-06", help="the date of the governing amendment")
    args = parser.parse_args(argv)
    if not has_history():
        print("no full git history here (a shallow clone or an export): nothing to check", file=sys.stderr)
        return 2
    lines, bad = check(args.since)
    print("\n".join(lines))
    if bad:
        print(f"{len(bad)} governed record(s) committed before the amendment of {args.since}", file=sys.stderr)
        return 1
    print(f"every governed record was committed after the amendment of {args.since}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
