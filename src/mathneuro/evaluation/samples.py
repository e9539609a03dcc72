"""Per-example records of an evaluation, from lm-eval's own ``log_samples`` output (no second evaluation).

One record per evaluated example: ``{"doc_id": int, "<metric>": number, ..., "answer": str}``
where the metric names are exactly those of ``results.json`` after the ``<side>/<task>/`` prefix
(``acc``, ``acc_norm``, ``exact_match,strict-match``...), so the mean of a column is the reported
metric. For generation tasks ``answer`` is the filtered / extracted answer of the first filter,
``answer,<filter>`` each filter's (lm-eval's ``gsm8k_cot`` has ``strict-match`` and ``flexible-extract``)
and ``response`` the model's raw generation, so a metric's surprises can be read off the records.
Metrics whose per-example value is not a number are left out (corpus-level scores such as BLEU), except a
pair of numbers, kept as ``[a, b]``: a perplexity's ``(loglikelihood, words)``, from which the paired
analysis computes the ratio of sums (:mod:`mathneuro.report.inference`).
Every record also carries ``doc_hash`` and ``prompt_hash`` (sha256 of the document and of the full
prompt the model saw, few-shot examples included: lm-eval's own hashes for harness tasks,
:func:`hash_text` of the same for the probes), ``prompt`` (the prompt's last :data:`PROMPT_CHARS`
characters, its question: :func:`prompt_excerpt`) and ``target``; a multiple-choice record names the
chosen and the correct choice by their text (``answer``, ``target``), not by index. The paired report
refuses to pair two records of one example whose ``prompt_hash`` differ.
Files: ``<dir>/<task>.jsonl``, one per evaluated task (each subtask of a group its own); a group
also gets its pooled records (:func:`pooled_records`: every subtask's, tagged with ``subtask``), so
that a group of many small subtasks (MMLU, a few questions per subject) can be compared as a whole.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
import socket
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from mathneuro.util.io import remove_orphaned_temps_under, write_text_atomic

SAMPLES_DIR = "samples"
SAMPLES_COMPLETE = ".complete.json"  # written last: the folder holds every task's records
PROMPT_CHARS = 300  # characters of a prompt a record keeps (its end: the question, after any few-shot examples)


def prompt_excerpt(prompt: str, limit: int = PROMPT_CHARS) -> str:
    """The end of ``prompt`` (where its question is), at most ``limit`` characters; ``…`` marks a cut."""
    return prompt if len(prompt) <= limit else "…" + prompt[len(prompt) - limit + 1:]


def _context(sample: Mapping[str, Any]) -> str | None:
    """The prompt of an lm-eval sample: its first request's context."""
    args = sample.get("arguments")
    first = args[0] if isinstance(args, list) and args else None
    if isinstance(first, dict):  # lm-eval's saved form: {"arg_0": context, "arg_1": ...}
        first = list(first.values())
    if isinstance(first, (list, tuple)) and first and isinstance(first[0], str):
        return first[0]
    return None


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, (int, float)):
        return float(value)
    try:  # numpy scalars
        import numpy as np

        if isinstance(value, np.generic) and np.ndim(value) == 0:
            return float(value)
    except ImportError:  # pragma: no cover
        pass
    return None


def _pair(value: Any) -> list[float] | None:
    """``[a, b]`` of a 2-tuple of numbers (a perplexity's log-likelihood and count), else None."""
    if isinstance(value, (list, tuple)) and len(value) == 2:
        numbers = [_number(v) for v in value]
        if all(v is not None for v in numbers):
            return numbers  # type: ignore[return-value]
    return None


def hash_text(text: str) -> str:
    """sha256 hex of ``text`` (lm-eval's ``hash_string``), for ``doc_hash`` / ``prompt_hash``."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def hash_doc(doc: Any) -> str:
    """:func:`hash_text` of a document as JSON (keys sorted, so the same document always hashes alike)."""
    return hash_text(json.dumps(doc, sort_keys=True, ensure_ascii=False, default=str))


def _choices(sample: Mapping[str, Any]) -> list[str] | None:
    """The continuations of a multiple-choice example (``(context, continuation)`` per request), else None."""
    args = sample.get("arguments")
    if not isinstance(args, list) or len(args) < 2:
        return None
    out = []
    for arg in args:
        if isinstance(arg, dict):  # lm-eval's saved form: {"arg_0": context, "arg_1": continuation}
            arg = list(arg.values())
        if not (isinstance(arg, (list, tuple)) and len(arg) == 2 and all(isinstance(a, str) for a in arg)):
            return None
        out.append(arg[1].strip())
    return out


def _mc_pick(sample: Mapping[str, Any], choices: list[str]) -> str | None:
    """The text of the choice with the highest log-likelihood (``filtered_resps``: ``(ll, greedy)`` each)."""
    resps = sample.get("filtered_resps")
    if not isinstance(resps, list) or len(resps) != len(choices):
        return None
    scores = []
    for resp in resps:
        value = resp[0] if isinstance(resp, (list, tuple)) and resp else resp
        number = _number(value)
        if number is None:
            return None
        scores.append(number)
    return choices[max(range(len(scores)), key=scores.__getitem__)]


def _target(sample: Mapping[str, Any], choices: list[str] | None) -> Any:
    target = sample.get("target")
    if choices is not None and isinstance(target, int) and not isinstance(target, bool) and 0 <= target < len(choices):
        return choices[target]
    if target is None or isinstance(target, (str, int, float)):
        return target
    return json.dumps(target, ensure_ascii=False, default=str)


def metric_name(metric: str, filter_key: str) -> str:
    """The flat metric name of lm-eval's (metric, filter): ``acc`` for the ``none`` filter, else ``metric,filter``."""
    return metric if filter_key == "none" else f"{metric},{filter_key}"


def records_from_lm_eval(logged: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """lm-eval's logged samples of one task (one entry per example and filter) -> one record per example."""
    by_doc: dict[int, dict[str, Any]] = {}
    for sample in logged:
        doc_id = int(sample["doc_id"])
        record = by_doc.setdefault(doc_id, {"doc_id": doc_id})
        for key in ("doc_hash", "prompt_hash"):
            if isinstance(sample.get(key), str):
                record.setdefault(key, sample[key])
        context = _context(sample)
        if context is not None:
            record.setdefault("prompt", prompt_excerpt(context))
        choices = _choices(sample)
        if sample.get("target") is not None:
            record.setdefault("target", _target(sample, choices))
        if choices is not None:
            pick = _mc_pick(sample, choices)
            if pick is not None:
                record.setdefault("answer", pick)
        filter_key = str(sample.get("filter", "none"))
        for metric in sample.get("metrics", []):
            value = _number(sample.get(metric))
            if value is None:
                value = _pair(sample.get(metric))
            if value is not None:
                record[metric_name(metric, filter_key)] = value
        resps = sample.get("filtered_resps")
        if isinstance(resps, list) and resps and all(isinstance(r, str) for r in resps):
            record.setdefault("answer", resps[0])
            if filter_key != "none":
                record[f"answer,{filter_key}"] = resps[0]
        raw = sample.get("resps")  # [[generation]] per request for generate_until; tuples for loglikelihood
        if isinstance(raw, list) and raw and isinstance(raw[0], list) and raw[0] and isinstance(raw[0][0], str):
            record.setdefault("response", raw[0][0])
    return [by_doc[k] for k in sorted(by_doc)]


def pooled_records(by_subtask: Mapping[str, Iterable[Mapping[str, Any]]]) -> list[dict[str, Any]]:
    """A group's records: every subtask's, each with ``"subtask": <name>`` (doc_ids repeat across
    subtasks; ``(subtask, doc_id)`` names an example). The mean of a column is the example-weighted
    mean over the subtasks (lm-eval's ``weight_by_size``, as MMLU aggregates)."""
    return [{**record, "subtask": name} for name in sorted(by_subtask) for record in by_subtask[name]]


def write_records(folder: str | Path, task: str, records: Iterable[Mapping[str, Any]]) -> Path:
    """Write ``<folder>/<task>.jsonl`` atomically (a partial file never replaces a complete one)."""
    path = Path(folder) / f"{task.replace('/', '_')}.jsonl"
    write_text_atomic(path, "".join(json.dumps(record, ensure_ascii=False, default=str) + "\n" for record in records))
    return path


def write_all(folder: str | Path, samples: Mapping[str, Iterable[Mapping[str, Any]]]) -> list[Path]:
    """Write every task's records under ``folder``; return the files."""
    return [write_records(folder, task, records) for task, records in samples.items()]


def write_samples(folder: str | Path, samples: Mapping[str, Iterable[Mapping[str, Any]]],
                  kinds: Mapping[str, str]) -> list[Path]:
    """Write every task's records under ``folder``, then ``.complete.json`` (``{"tasks": {task: side}}``).
    The caller holds the folder's claim (the point's, the baseline's lock): temp files a killed writer
    left there are removed."""
    paths = write_all(folder, samples)
    remove_orphaned_temps_under(folder)
    write_text_atomic(Path(folder) / SAMPLES_COMPLETE,
                      json.dumps({"tasks": {t: kinds.get(t, "nonmath") for t in samples}}, sort_keys=True))
    return paths


def copy_records(source: str | Path, dest: str | Path) -> Path:
    """A copy of the complete records folder ``source`` at ``dest`` (made once: a complete ``dest`` is kept).

    The copy is assembled in a temp folder beside ``dest`` and renamed into place, so ``dest`` is whole
    or absent whatever is killed when; of two processes copying at once, one rename wins and the other
    drops its copy. Files are copied, never linked: the sweep folder must outlive the cache they come
    from. A temp folder a killed process of this host left behind is removed."""
    source, dest = Path(source), Path(dest)
    if (dest / SAMPLES_COMPLETE).is_file():
        return dest
    if not (source / SAMPLES_COMPLETE).is_file():
        raise FileNotFoundError(2, "no complete per-example records here", str(source))
    dest.parent.mkdir(parents=True, exist_ok=True)
    prefix = f".{dest.name}.tmp-{socket.gethostname()}-"
    for orphan in dest.parent.glob(f"{prefix}*"):
        if not _alive(orphan.name[len(prefix):]):
            shutil.rmtree(orphan, ignore_errors=True)
    tmp = dest.parent / f"{prefix}{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        tmp.mkdir()
        for path in sorted(source.iterdir()):
            if path.is_file() and path.name != SAMPLES_COMPLETE:
                write_bytes_synced(tmp / path.name, path.read_bytes())
        write_bytes_synced(tmp / SAMPLES_COMPLETE, (source / SAMPLES_COMPLETE).read_bytes())  # last: it vouches
        try:
            os.rename(tmp, dest)
        except OSError:
            if not (dest / SAMPLES_COMPLETE).is_file():  # not another process's complete copy: a real failure
                raise
    except OSError as exc:  # named by the folder it was copying to, not the temp folder
        raise OSError(exc.errno, exc.strerror or str(exc), str(dest)) from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return dest


def write_bytes_synced(path: Path, data: bytes) -> None:
    """Write ``data`` to a new file ``path`` (the umask's mode) and sync it to disk; an OSError names ``path``."""
    try:
        with open(path, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
    except OSError as exc:
        raise OSError(exc.errno, exc.strerror or str(exc), str(path)) from None


def _alive(pid: str) -> bool:
    try:
        os.kill(int(pid), 0)
    except (ValueError, ProcessLookupError):
        return False
    except PermissionError:
        return True
    return True


def samples_summary(run_dir: str | Path, baseline_dir: str | Path | None, kinds: Mapping[str, str],
                    root: str | Path | None = None) -> dict[str, Any]:
    """``results["samples"]``: the run's records folder (relative), the baseline's (relative to the run dir
    when inside ``root``, the sweep folder, default the run dir, e.g. ``../baseline_samples/<key>``; else
    absolute; None without a baseline) and each recorded task's side."""
    baseline: str | None = None
    if baseline_dir is not None:
        path = Path(baseline_dir).resolve()
        run = Path(run_dir).resolve()
        inside = Path(root).resolve() if root is not None else run
        baseline = os.path.relpath(path, run) if path.is_relative_to(inside) else str(path)
    return {"dir": SAMPLES_DIR, "baseline_dir": baseline, "tasks": dict(sorted(kinds.items()))}


def read_records(path: str | Path) -> list[dict[str, Any]]:
    """The records of one ``<task>.jsonl`` file."""
    with Path(path).open(encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def column_mean(records: Iterable[Mapping[str, Any]], metric: str) -> float:
    """The mean of one metric over the records that have it (NaN when none do)."""
    values = [float(r[metric]) for r in records if metric in r and _number(r[metric]) is not None]
    return math.fsum(values) / len(values) if values else float("nan")
