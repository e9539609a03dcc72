"""Pairing only what was asked alike: two points' records of one example must carry the same prompt hash.

Per-example records carry ``prompt_hash`` (sha256 of the full prompt the model saw, few-shot examples
included; :mod:`mathneuro.evaluation.samples`). Two points evaluated with another few-shot count,
chat template or prompt file have records with the same ``doc_id`` but different prompts; a paired
difference between them would measure the prompt, not the edit. :func:`prompt_clash` finds that and
says so in one line naming the task and the two points; the paired report then refuses the pair.
Records written before prompt hashes existed (no ``prompt_hash``) are not checked.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mathneuro.data.datasets import read_jsonl

_CACHE: dict[tuple[str, int, int], dict[Any, str]] = {}


def prompt_hashes(path: str | Path) -> dict[Any, str]:
    """``{doc key: prompt_hash}`` of one ``samples/<task>.jsonl`` (keys as the paired report's: ``doc_id``,
    or ``(subtask, doc_id)`` for a group's pooled records); records without a hash are left out."""
    path = Path(path)
    try:
        stat = path.stat()
    except OSError:
        return {}
    key = (str(path.resolve()), stat.st_mtime_ns, stat.st_size)
    if key not in _CACHE:
        out: dict[Any, str] = {}
        for item in read_jsonl(path, "samples"):
            digest = item.get("prompt_hash")
            if not isinstance(digest, str) or "doc_id" not in item:
                continue
            doc: Any = int(item["doc_id"])
            if "subtask" in item:
                doc = (str(item["subtask"]), doc)
            out[doc] = digest
        _CACHE[key] = out
    return _CACHE[key]


def prompt_clash(task: str, mine: str | Path, theirs: str | Path, mine_name: str, theirs_name: str) -> str | None:
    """One line when the records of ``task`` in files ``mine`` and ``theirs`` give a shared example
    different prompts (None when every shared example has the same prompt hash, or one side has none)."""
    a, b = prompt_hashes(mine), prompt_hashes(theirs)
    shared = [doc for doc in a if doc in b]
    differ = [doc for doc in shared if a[doc] != b[doc]]
    if not differ:
        return None
    return (f"task {task}: refused to pair {mine_name} with {theirs_name}: the prompts differ on {len(differ)} of "
            f"{len(shared)} shared examples (e.g. doc {differ[0]}; another few-shot count, template or prompt file?)")
