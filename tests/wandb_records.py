"""Reading offline W&B runs back with wandb's own record reader (``wandb leet inspect --json``), for tests."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path


def wandb_executable() -> str:
    """The ``wandb`` command of the Python running the tests."""
    beside = Path(sys.executable).parent / "wandb"
    return str(beside) if beside.exists() else (shutil.which("wandb") or "wandb")


@dataclass
class RunRecords:
    """One offline run as its ``.wandb`` file holds it: run record, merged config and summary, history
    rows, metric definitions and artifacts."""

    folder: Path
    records: list[dict]
    run: dict = field(default_factory=dict)
    config: dict = field(default_factory=dict)
    summary: dict = field(default_factory=dict)
    history: list[dict] = field(default_factory=list)
    metrics: list[dict] = field(default_factory=list)
    artifacts: list[dict] = field(default_factory=list)

    def artifact(self, kind: str) -> dict:
        (found,) = [a for a in self.artifacts if a["type"] == kind]
        return found

    def table(self, key: str) -> dict:
        """A logged ``wandb.Table`` (its JSON file in the run's folder): ``{"columns", "data"}``."""
        path = self.folder / "files" / self.summary[f"{key}.path"]
        return json.loads(path.read_text())


def _merge(into: dict, update: dict) -> None:
    for key, value in update.items():
        into[key] = value


def read_run(folder: Path, timeout: float = 60.0) -> RunRecords:
    """The records of the offline run in ``folder`` (waits, bounded, until its exit record is written:
    W&B's writer is another process)."""
    deadline = time.time() + timeout
    while True:
        done = subprocess.run([wandb_executable(), "leet", "inspect", "--json", str(folder)], capture_output=True,
                              text=True, timeout=120)
        records = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
        if any(r.get("type") == "exit" for r in records) or time.time() > deadline:
            break
        time.sleep(0.5)
    assert records, f"wandb leet read nothing from {folder}: {done.stderr[-2000:]}"
    out = RunRecords(Path(folder), records)
    for rec in records:
        kind = rec.get("type")
        body = rec.get(kind) or {}
        if kind == "run":
            out.run = body
            _merge(out.config, (body.get("config") or {}).get("update") or {})
        elif kind == "config":
            _merge(out.config, body.get("update") or {})
        elif kind == "summary":
            _merge(out.summary, body.get("update") or {})
        elif kind == "history":
            out.history.append(body.get("item") or {})
        elif kind == "metric":
            out.metrics.append(body)
        elif kind == "artifact":
            out.artifacts.append({**body, "metadata": json.loads(body.get("metadata") or "{}"),
                                  "files": [c["path"] for c in (body.get("manifest") or {}).get("contents", [])]})
    return out
