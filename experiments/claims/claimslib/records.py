"""Per-example records committed with the repository, compressed: the layout and its packer.

A study is a folder ``<root>/<study>/`` (``experiments/records/`` in this repository) of files
``<name>.jsonl.gz``. Line 1 of a file is its header, every further line one evaluated example:

- ``{"kind": "point", "study", "name", "point": {model, task, filter, method, top_k, intervention,
  scalar, seed, num_samples[, reference, share]}, "metrics", "baseline_metrics", "selection": {counts,
  fractions, per_layer, per_module}, "objective", "hardware", "timings", "sample_ids_hash",
  "tasks": {task: side}, "baseline": <name of the baseline file>, "source": <run dir>, "provenance",
  "computed_elsewhere", "machine"[, "runs": [{source, tasks, machine, hardware, provenance, timings, ...}]]}``:
  ``runs`` where the point's tasks were evaluated in several runs (its metrics are all of theirs; the other
  fields the first's); ``machine``: the kind of machine (:func:`mathneuro.report.machines.kind_key`: name and CPU
  kernel flags), "<kind>, noted, not recorded" for hardware noted after the run, "not recorded" without any
- ``{"kind": "baseline", ..., "machine" or "task_machines": {task: machine}}``: the unedited model's records
  that points name; ``{"kind": "table",
  ...}``: rows of a table (e.g. ``data_efficiency.csv``), one per line; ``{"kind": "overlap", ...}``: two
  draws' selections counted per weight matrix (claim 5; :mod:`claimslib.overlap_records`).
- examples: ``{"task", "doc_id"[, "subtask"], <metric>: number | [number, number], ...}``: numbers
  only (booleans as 0/1; a pair such as ``[loglikelihood, words]`` for a perplexity). Strings (model
  answers) are left out; a group's subtask files are left out where the pooled group file holds them.

Files are written with a fixed gzip header (mtime 0, no name) and sorted keys, so packing the same
run twice gives the same bytes. :func:`pack_sweep` packs a sweep's run dirs (``results.json``,
``samples/*.jsonl`` and the baseline's samples); :func:`read_study` / :func:`read_tree` read them back.
"""

from __future__ import annotations

import csv
import gzip
import hashlib
import json
import math
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mathneuro.data import read_jsonl
from mathneuro.report.machines import machine_of
from mathneuro.report.point_records import point_records
from mathneuro.report.sweep import load_results
from mathneuro.results.schema import SELECTION_FIELDS
from mathneuro.util.io import atomic_write

SUFFIX = ".jsonl.gz"
KINDS = ("point", "baseline", "table", "overlap")
SELECTION_KEPT = (*SELECTION_FIELDS, "num_parameters_upstream", "per_layer", "per_module")
HEADER_FIELDS = ("metrics", "baseline_metrics", "objective", "hardware", "timings", "sample_ids_hash", "method_facts",
                 "provenance", "computed_elsewhere", "baseline_hardware", "baseline_provenance")


@dataclass
class Packed:
    """One packed file: its header and its examples (``{task: {key: {metric: value}}}``, key =
    ``doc_id`` or ``(subtask, doc_id)``) or, for a table, its rows."""

    name: str
    header: dict
    examples: dict[str, dict[Any, dict[str, Any]]] = field(default_factory=dict)
    rows: list[dict] = field(default_factory=list)

    @property
    def kind(self) -> str:
        return str(self.header.get("kind"))

    @property
    def point(self) -> dict:
        return dict(self.header.get("point") or {})

    def task(self, name: str) -> dict[Any, dict[str, Any]] | None:
        return self.examples.get(name)


# ------------------------------------------------------------------------------------ writing
def _clean(value: Any) -> Any:
    """A number, a pair of numbers, or None (left out)."""
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, (int, float)):
        return value if math.isfinite(float(value)) else None
    if isinstance(value, (list, tuple)) and len(value) == 2 and all(
            isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(float(v)) for v in value):
        return [value[0], value[1]]
    return None


def example_line(task: str, record: Mapping[str, Any]) -> dict | None:
    """The packed line of one ``samples/<task>.jsonl`` record (None without a doc_id)."""
    if "doc_id" not in record:
        return None
    line: dict[str, Any] = {"task": task, "doc_id": int(record["doc_id"])}
    if "subtask" in record:
        line["subtask"] = str(record["subtask"])
    for key, value in record.items():
        if key in ("doc_id", "subtask", "task") or key.endswith("_stderr"):
            continue
        clean = _clean(value)
        if clean is not None:
            line[key] = clean
    return line


def _dumps(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def write_packed(path: str | Path, header: Mapping[str, Any], lines: Iterable[Mapping[str, Any]]) -> Path:
    """Write one packed file atomically, byte-for-byte reproducible."""
    path = Path(path)
    raw = "".join(_dumps(x) + "\n" for x in [header, *lines]).encode("utf-8")

    def write(tmp: str) -> None:
        with open(tmp, "wb") as fh, gzip.GzipFile(filename="", mode="wb", fileobj=fh, mtime=0, compresslevel=9) as gz:
            gz.write(raw)

    atomic_write(path, write)
    return path


def _safe(text: Any) -> str:
    return re.sub(r"[^A-Za-z0-9._+-]+", "-", str(text)).strip("-") or "none"


def point_name(point: Mapping[str, Any]) -> str:
    """The file stem of a point: method (and whose counts a random point copies), filter, K,
    intervention and s, N and seed, e.g. ``random-wanda__race__k0.15__prune0__n100__seed3``."""
    method = _safe(point.get("method"))
    if point.get("reference"):  # recorded only where another method than the default sizes the reference
        method += f"-{_safe(point['reference'])}"
    parts = [method, _safe(point.get("filter")), f"k{_safe(point.get('top_k'))}",
             f"{_safe(point.get('intervention'))}{_safe(point.get('scalar'))}", f"n{_safe(point.get('num_samples'))}",
             f"seed{_safe(point.get('seed'))}"]
    return "__".join(parts)


def _sample_lines(folder: Path, tasks: Iterable[str]) -> list[dict]:
    """Every example of the tasks' files under ``folder``; a subtask whose examples the pooled group
    file already holds (``subtask`` field) is left out."""
    found = {t: folder / f"{t.replace('/', '_')}.jsonl" for t in tasks}
    records = {t: read_jsonl(p, "samples") for t, p in sorted(found.items()) if p.is_file()}
    pooled = {str(r["subtask"]) for rs in records.values() for r in rs if "subtask" in r}
    lines = []
    for task, rows in records.items():
        if task in pooled:
            continue
        lines += [line for line in (example_line(task, r) for r in rows) if line is not None]
    return lines


def _header(kind: str, study: str, name: str, **fields: Any) -> dict:
    return {"kind": kind, "study": study, "name": name, **{k: v for k, v in fields.items() if v is not None}}


RUN_FIELDS = ("hardware", "provenance", "timings", "computed_elsewhere", "sample_ids_hash")  # each run's, in ``runs``


@dataclass
class _Run:
    """One complete run dir of a point, ready to pack."""

    result: dict
    recs: Any  # PointRecords
    baseline: str | None

    @property
    def tasks(self) -> set[str]:
        return set(self.recs.tasks)


def _buckets(runs: list[_Run]) -> list[list[_Run]]:
    """Runs of one point grouped into records: runs over disjoint tasks paired with the same baseline
    join one record (a point evaluated on more tasks in a later run); a run repeating a task is kept apart."""
    buckets: list[list[_Run]] = []
    for run in runs:
        home = next((b for b in buckets if b[0].baseline == run.baseline
                     and not any(run.tasks & other.tasks for other in b)), None)
        if home is None:
            buckets.append([run])
        else:
            home.append(run)
    return buckets


def _point_header(study: str, name: str, runs: list[_Run]) -> dict:
    """The header of a record made of one run, or of several over disjoint tasks: the first run's fields,
    every run's tasks and metrics, and (for several) ``runs``: each run's source, tasks, machine and code."""
    first = runs[0].result
    selection = {k: v for k, v in (first.get("selection") or {}).items() if k in SELECTION_KEPT}
    fields = {k: first.get(k) for k in HEADER_FIELDS}
    tasks: dict[str, Any] = {}
    for run in runs:
        tasks.update(run.recs.tasks)
    if len(runs) > 1:
        for key in ("metrics", "baseline_metrics"):
            merged: dict[str, Any] = {}
            for run in runs:
                merged.update(run.result.get(key) or {})
            fields[key] = merged or None
        elsewhere: dict[str, Any] = {}
        for run in runs:
            elsewhere.update(run.result.get("computed_elsewhere") or {})
        fields["computed_elsewhere"] = elsewhere or None
        fields["runs"] = [{"source": str(run.result.get("_job")), "tasks": sorted(run.recs.tasks),
                           "machine": machine_of(run.result.get("hardware")).label,
                           **{f: run.result[f] for f in RUN_FIELDS if run.result.get(f) is not None}}
                          for run in runs]
    return _header("point", study, name, point=first.get("point"), selection=selection, tasks=tasks,
                   baseline=runs[0].baseline, source=str(first.get("_job")),
                   machine=machine_of(first.get("hardware")).label, **fields)


def pack_sweep(sources: str | Path | Iterable[str | Path], out_dir: str | Path, *, study: str,
               baseline: str | None = None, include: Callable[[dict], bool] | None = None) -> list[Path]:
    """Pack every complete point with per-example records of the sweep(s) into ``out_dir`` (the
    study's folder): one file per point and one per distinct baseline (named by its content).
    ``baseline`` names the packed baseline of points evaluated without their own
    (``eval.baseline=false``; see :func:`pack_baseline`); ``include(result)``: which points to pack
    (default all), e.g. those of one machine when each machine's points pair with their own baseline.

    A point evaluated in several runs over different tasks (WikiText in a sweep of its own, a task added
    later) packs as one file holding every task, its header listing the runs (``runs``); two runs of one
    point over the same task are packed apart, the later named ``<point>__<hash of its run dir>``."""
    sources = [sources] if isinstance(sources, (str, Path)) else list(sources)
    out = Path(out_dir)
    written: list[Path] = []
    baselines: dict[Path, str] = {}
    by_name: dict[str, list[_Run]] = {}
    for source in sources:
        complete, _missing = load_results(source)
        for result in sorted(complete, key=lambda r: str(r.get("_job"))):
            if include is not None and not include(result):
                continue
            recs = point_records(result)
            if recs is None:
                continue
            base_name = baseline
            if recs.baseline_dir is not None and recs.baseline_dir.is_dir():
                key = recs.baseline_dir.resolve()
                if key not in baselines:
                    lines = _sample_lines(recs.baseline_dir, recs.tasks)
                    digest = hashlib.sha1("".join(_dumps(x) for x in lines).encode()).hexdigest()[:10]
                    baselines[key] = f"baseline-{digest}"
                    point = result.get("point") or {}
                    hardware = result.get("baseline_hardware") or result.get("hardware")  # where it was computed
                    header = _header("baseline", study, baselines[key], point={"model": point.get("model")},
                                     metrics=result.get("baseline_metrics"), hardware=hardware,
                                     machine=machine_of(hardware).label, tasks=recs.tasks,
                                     source=recs.baseline_dir.name)
                    written.append(write_packed(out / f"{baselines[key]}{SUFFIX}", header, lines))
                base_name = baselines[key]
            by_name.setdefault(point_name(result.get("point") or {}), []).append(_Run(result, recs, base_name))
    for name, runs in by_name.items():
        for i, bucket in enumerate(_buckets(runs)):
            stem = name
            if i:  # a repeated run of the point: apart, under a short name of its run dir(s)
                jobs = "\n".join(str(run.result.get("_job")) for run in bucket)
                stem = f"{name}__{hashlib.sha1(jobs.encode()).hexdigest()[:10]}"
            lines = [line for run in bucket for line in _sample_lines(run.recs.samples_dir, run.recs.tasks)]
            written.append(write_packed(out / f"{stem}{SUFFIX}", _point_header(study, stem, bucket), lines))
    return written


def pack_baseline(task_dirs: Mapping[str, str | Path], out_dir: str | Path, *, study: str,
                  model: str | None = None, noted_hardware: Mapping[str, dict] | None = None) -> Path | None:
    """Pack one unedited evaluation made task by task (``{task: folder}``, each folder holding
    ``<task>.jsonl`` and ``metrics.json``, as ``experiments/claims/baseline_eval.py`` writes them) as one
    baseline file named by its content; None when no task is there yet. ``task_hardware``: where
    each task was evaluated, for the tasks whose ``metrics.json`` says so, else as ``noted_hardware``
    says (noted after the run: say how in its entries); ``task_provenance``: the code that evaluated each
    task, where its ``metrics.json`` records it."""
    lines: list[dict] = []
    metrics: dict[str, Any] = {}
    hardware: dict[str, Any] = {}
    code: dict[str, Any] = {}
    tasks = []
    for task, folder in sorted(task_dirs.items()):
        folder = Path(folder)
        if not (folder / "metrics.json").is_file():
            continue
        tasks.append(task)
        written = json.loads((folder / "metrics.json").read_text())
        metrics.update(written.get("metrics") or {})
        if written.get("hardware") or (noted_hardware or {}).get(task):
            hardware[task] = written.get("hardware") or noted_hardware[task]
        if isinstance(written.get("provenance"), dict):
            code[task] = written["provenance"]
        lines += _sample_lines(folder, [task])
    if not tasks:
        return None
    digest = hashlib.sha1("".join(_dumps(x) for x in lines).encode()).hexdigest()[:10]
    name = f"baseline-{digest}"
    header = _header("baseline", study, name, point={"model": model}, metrics=metrics, tasks=tasks,
                     source="baseline_eval", task_hardware=hardware or None, task_provenance=code or None,
                     task_machines={task: machine_of(hardware.get(task)).label for task in tasks})
    return write_packed(Path(out_dir) / f"{name}{SUFFIX}", header, lines)


def _number(text: str) -> Any:
    try:
        value = float(text)
    except ValueError:
        return text if text != "" else None
    return int(value) if value.is_integer() and re.fullmatch(r"-?\d+", text.strip()) else value


def pack_table(csv_path: str | Path, out_dir: str | Path, *, study: str, name: str) -> Path:
    """Pack a CSV table (e.g. ``data_efficiency.csv``) as a ``table`` file: one line per row."""
    with Path(csv_path).open(newline="") as fh:
        rows = [{k: _number(v) for k, v in row.items()} for row in csv.DictReader(fh)]
    header = _header("table", study, name, source=Path(csv_path).name)
    return write_packed(Path(out_dir) / f"{_safe(name)}{SUFFIX}", header, rows)


def machine_labels(header: Mapping[str, Any]) -> dict[str, Any]:
    """The machine labels a header gets at pack time, from its own hardware fields only (never invented): a
    point's ``machine`` (and each run's), a task-by-task baseline's ``task_machines``, another baseline's
    ``machine``. Empty for a table or an overlap record."""
    kind = header.get("kind")
    if kind == "point":
        out: dict[str, Any] = {"machine": machine_of(header.get("hardware")).label}
        if header.get("runs"):
            out["runs"] = [{**run, "machine": machine_of(run.get("hardware")).label} for run in header["runs"]]
        return out
    if kind == "baseline" and (header.get("task_hardware") is not None or header.get("source") == "baseline_eval"):
        task_hw = header.get("task_hardware") or {}
        return {"task_machines": {t: machine_of(task_hw.get(t)).label for t in header.get("tasks") or []}}
    return {"machine": machine_of(header.get("hardware")).label} if kind == "baseline" else {}


def label_machines(path: str | Path) -> bool:
    """Add :func:`machine_labels` to a packed file's header (records packed before headers named their
    machine); every other line is kept as it is. True when the file changed."""
    path = Path(path)
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        lines = [json.loads(line) for line in fh if line.strip()]
    header = {**lines[0], **machine_labels(lines[0])}
    if header == lines[0]:
        return False
    write_packed(path, header, lines[1:])
    return True


# ------------------------------------------------------------------------------------ reading
def read_packed(path: str | Path) -> Packed:
    """One packed file."""
    path = Path(path)
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        lines = [json.loads(line) for line in fh if line.strip()]
    if not lines or lines[0].get("kind") not in KINDS:
        raise ValueError(f"{path}: not a packed records file (its first line is no header of kind {KINDS})")
    header, body = lines[0], lines[1:]
    packed = Packed(str(header.get("name") or path.name[: -len(SUFFIX)]), header)
    if packed.kind in ("table", "overlap"):  # rows: a table's, or an overlap's per-matrix counts
        packed.rows = body
        return packed
    for line in body:
        task = str(line.pop("task"))
        doc = int(line.pop("doc_id"))
        key = (str(line.pop("subtask")), doc) if "subtask" in line else doc
        packed.examples.setdefault(task, {})[key] = line
    return packed


def read_study(folder: str | Path) -> list[Packed]:
    """Every packed file of one study folder, by name."""
    return [read_packed(p) for p in sorted(Path(folder).glob(f"*{SUFFIX}"))]


def read_tree(root: str | Path) -> dict[str, list[Packed]]:
    """``{study: [Packed, ...]}`` of every study folder under ``root`` (empty when there is none)."""
    root = Path(root)
    if not root.is_dir():
        return {}
    return {d.name: read_study(d) for d in sorted(root.iterdir()) if d.is_dir() and any(d.glob(f"*{SUFFIX}"))}
