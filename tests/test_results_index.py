"""experiments/results/README.md: a row for every result folder, and every reproduce command's commit and
scripts exist in the repository's history."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "experiments" / "results"
INDEX = RESULTS / "README.md"
#: One reproduce command: ``git checkout <commit> && <command>`` inside one pair of backticks.
COMMAND = re.compile(r"`git checkout ([0-9a-f]{7,40}) && ([^`]*)`")
SCRIPT = re.compile(r"\bexperiments/[\w./-]+\.(?:py|sh)\b")


def _rows() -> list[str]:
    """The table rows of the index below its header row."""
    return [line for line in INDEX.read_text().splitlines() if line.startswith("| `")]


def _row_folders() -> set[str]:
    """The top-level result folder each row names in its first cell."""
    return {re.match(r"\| `([^`/]+)", row).group(1) for row in _rows()}


def _git(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True)


def _full_history() -> bool:
    """Whether a complete git history is here to check commits against (not shallow, not absent)."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        return False
    shallow = _git("rev-parse", "--is-shallow-repository")
    return shallow.returncode == 0 and shallow.stdout.strip() == "false"


def _commands() -> list[tuple[str, str]]:
    return [(m.group(1), m.group(2)) for row in _rows() for m in COMMAND.finditer(row)]


def test_every_result_folder_has_a_row() -> None:
    folders = {p.name for p in RESULTS.iterdir() if p.is_dir()}
    assert folders, "no result folders found"
    assert folders - _row_folders() == set(), "result folders without a row in experiments/results/README.md"
    assert _row_folders() - folders == set(), "rows naming a folder that is not under experiments/results/"


def test_every_row_names_a_reproduce_command() -> None:
    assert [row for row in _rows() if not COMMAND.search(row)] == []


def test_commands_parse_commits_and_scripts() -> None:
    row = "| `x` | y | `git checkout 1234abc && bash experiments/run.sh core --out experiments/results/x/a.json` | z |"
    (commit, command), = [(m.group(1), m.group(2)) for m in COMMAND.finditer(row)]
    assert commit == "1234abc"
    assert SCRIPT.findall(command) == ["experiments/run.sh"]


@pytest.mark.integration  # runs git
@pytest.mark.skipif(not _full_history(), reason="needs the repository's full git history")
def test_every_commit_and_script_exists_in_history() -> None:
    missing_commits, missing_scripts = [], []
    for commit, command in _commands():
        if _git("cat-file", "-e", f"{commit}^{{commit}}").returncode != 0:
            missing_commits.append(commit)
            continue
        for script in SCRIPT.findall(command):
            if _git("cat-file", "-e", f"{commit}:{script}").returncode != 0:
                missing_scripts.append(f"{commit}:{script}")
    assert _commands(), "no reproduce commands found"
    assert missing_commits == []
    assert missing_scripts == []
