"""Check, from git history, that the analysis plan's governing amendments were committed before every record line.

    .venv/bin/python experiments/claims/plan_precedes_records.py [--since 2026-12-06] [--under STUDY ...]

Lists each dated amendment of ``experiments/ANALYSIS_PLAN.md`` with the commit that added it, and each
committed record under ``experiments/records/`` with the commits that added its lines. A record grows after
its first commit (a point evaluated on more tasks, a repacked header), so every line is checked, not only the
file's first commit: the lines of a ``.jsonl.gz`` record are compared, decompressed, between consecutive
commits of the file, and each commit that added a line must descend from every amendment dated ``--since``
(the plan fitted to this machine, issue 40; several amendments of one date are all checked). A record the
claims table reads (every file but the context-only tables in ``CONTEXT``) that gained a line before them
is named; exit status 1 names any, 2 when the history is not there (a shallow clone, an export). ``--under``
checks the records of some studies only (those a later amendment governs). For every amendment after
``--since`` the report says which governed records had lines committed before it (what had been seen).
The confirmatory amendment (its title begins "(confirmatory)") governs ``experiments/records/confirm*/``: every
line of a record there must also come after that amendment's commit (always checked; a record there with no
committed confirmatory amendment is named).
"""

from __future__ import annotations

import argparse
import gzip
import re
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
PLAN = "experiments/ANALYSIS_PLAN.md"
RECORDS = "experiments/records"
# records the claims table shows as context only (claims.py: the issue-16 overlap table predates the plan)
CONTEXT = ("experiments/records/data_efficiency/qwen2_5_coder_1_5b__mmlu.jsonl.gz",)
AMENDMENT = re.compile(r"^- \*\*(\d{4}-\d{2}-\d{2})(.*?)\*\*")
#: The confirmatory amendment's records (ANALYSIS_PLAN.md's confirmatory block) and the mark of its title.
CONFIRM_RECORDS, CONFIRMATORY = f"{RECORDS}/confirm", "(confirmatory)"  # records/confirm*/: confirm, confirm_keep


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


def _lines(root: Path, commit: str, path: str) -> set[bytes]:
    """The lines of ``path`` at ``commit`` (decompressed where gzip; empty where the file is absent)."""
    blob = subprocess.run(["git", "-C", str(root), "show", f"{commit}:{path}"], capture_output=True)
    if blob.returncode != 0:
        return set()
    data = blob.stdout
    try:
        data = gzip.decompress(data)
    except (OSError, EOFError):
        pass  # not gzip: its raw lines
    return set(data.splitlines())


def line_commits(root: Path, path: str) -> list[tuple[str, int]]:
    """``(commit, lines it added)`` for every commit of ``path`` (oldest first) that added a line to it."""
    commits = git(root, "log", "--reverse", "--format=%H", "--", path).split()
    out, before = [], set()
    for commit in commits:
        now = _lines(root, commit, path)
        if now - before:
            out.append((commit, len(now - before)))
        before = now
    return out


def records(root: Path = ROOT, under: tuple[str, ...] = ()) -> list[tuple[str, str]]:
    """``(path, commit that first added it)`` for every record file committed now (``under``: only these
    studies, folders of the records folder)."""
    paths = git(root, "ls-files", "--", *([f"{RECORDS}/{u}" for u in under] or [RECORDS])).split()
    return [(p, (git(root, "log", "--diff-filter=A", "--format=%H", "--", p).split() or [""])[-1]) for p in paths]


def _descends(root: Path, ancestor: str, commit: str) -> bool:
    return bool(commit) and subprocess.run(["git", "-C", str(root), "merge-base", "--is-ancestor", ancestor, commit],
                                           capture_output=True).returncode == 0


def check(since: str, root: Path = ROOT, under: tuple[str, ...] = ()) -> tuple[list[str], list[str]]:
    """(report lines, violations): each amendment's commit; each record's commits that added lines, and the
    records that gained a line before every amendment dated ``since`` was committed (``under``: only the
    records of these studies, e.g. those a later amendment governs)."""
    found = amendments(root)
    governing = [c for date, _, c in found if date == since and c]
    if not governing:
        raise ValueError(f"no committed amendment dated {since} in {PLAN}")
    confirmatory = [c for _, title, c in found if title.startswith(CONFIRMATORY) and c]

    def when(commit: str) -> str:
        return git(root, "show", "-s", "--format=%ad", "--date=iso", commit).strip() if commit else "(not committed)"

    lines = [f"amendment {date} {title[:70]!r}: {c[:10]} {when(c)}" for date, title, c in found]
    bad, seen = [], {}
    for path, _first in records(root, under):
        governed = path not in CONTEXT
        added = line_commits(root, path)
        seen[path] = added
        mine = [*governing, *confirmatory] if path.startswith(CONFIRM_RECORDS) else governing
        early = [(c, n) for c, n in added if not all(_descends(root, g, c) for g in mine)]
        if path.startswith(CONFIRM_RECORDS) and not confirmatory:
            early = added  # the amendment that governs it is not committed
        first = added[0][0] if added else ""
        later = f" (+{len(added) - 1} later commit(s) adding lines)" if len(added) > 1 else ""
        lines.append(f"{'governed' if governed else 'context '} {path[len(RECORDS) + 1:]}: {first[:10]} {when(first)}"
                     f"{later}{'' if not early or not governed else '  <- LINES BEFORE THE AMENDMENT'}")
        for commit, n in early if governed else []:
            which = f"of {since}" + (" or the confirmatory one" if mine is not governing else "")
            lines.append(f"    {n} line(s) added in {commit[:10]} {when(commit)}, before the amendment {which}")
        if governed and (early or not added):
            bad.append(path)
    return lines + _seen_before(root, [a for a in found if a[0] > since and a[2]], seen), bad


def _seen_before(root: Path, later: list[tuple[str, str, str]], seen: dict[str, list[tuple[str, int]]]) -> list[str]:
    """For every amendment after the governing one: the governed records that had lines committed before it
    (what had been seen when it was made; its text must say so), by study."""
    out = []
    for date, title, commit in later:
        studies: dict[str, int] = {}
        for path, added in seen.items():
            if path not in CONTEXT and any(not _descends(root, commit, c) for c, _ in added):
                study = path[len(RECORDS) + 1:].split("/")[0]
                studies[study] = studies.get(study, 0) + 1
        listed = ", ".join(f"{k} ({v})" for k, v in sorted(studies.items())) or "none"
        out.append(f"before amendment {date} {title[:50]!r}: governed records with lines committed then: {listed}")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--since", default="2026-12-06", help="the date of the governing amendment(s)")
    parser.add_argument("--under", action="append", default=[], metavar="STUDY",
                        help="check only the records of this study (repeatable; default: every record)")
    args = parser.parse_args(argv)
    if not has_history():
        print("no full git history here (a shallow clone or an export): nothing to check", file=sys.stderr)
        return 2
    lines, bad = check(args.since, under=tuple(args.under))
    print("\n".join(lines))
    if bad:
        print(f"{len(bad)} governed record(s) gained lines before the amendment(s) of {args.since}", file=sys.stderr)
        return 1
    print(f"every line of every governed record was committed after the amendment(s) of {args.since}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
