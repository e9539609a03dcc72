"""The package's shape: small modules, and the pipeline never imports the report layer."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

SRC = Path(__file__).resolve().parent.parent / "src" / "mathneuro"
MAX_LINES = 420  # "about 400"


def test_no_module_is_large():
    sizes = {str(p.relative_to(SRC)): len(p.read_text().splitlines()) for p in SRC.rglob("*.py")}
    assert {name: n for name, n in sizes.items() if n > MAX_LINES} == {}


def test_runner_imports_nothing_from_the_report_layer():
    code = ("import sys, mathneuro.pipeline.runner, mathneuro.pipeline.cli; "
            "print(sorted(m for m in sys.modules if m.startswith(('mathneuro.report', 'matplotlib'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
