"""A point's identity: everything in its resolved config that can change its numbers, except its seed.

Points whose identities match are seeds of one point, and the report pools them (mean ± std over seeds,
paired differences pooled per example). The report groups points by a few point fields (model, task,
filter, method, top-K, ...); two points that share those fields and their seed's role but differ in
anything else that can change their numbers (``task.template``, ``eval.num_fewshot``, ``model.dtype``,
a method's setting, ...) are *not* seeds of one point. :func:`mark_identities` finds the config keys
that differ inside such a group and writes them into each result's point as ``config.<key>`` fields,
so every table (points.csv, summary.md, paired.csv, the console, W&B, the figures) shows them as separate
rows, the key named in a column.

The identity is derived from the whole resolved config (``results["config"]``) less a deny-list of keys
that cannot change a number (:data:`NON_NUMERIC_KEYS`: the logger, progress bars, output and cache paths,
resuming, ...), so a key added later counts until it is listed here.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, MutableMapping, Sequence
from typing import Any

#: Prefix of the point fields that name a config key separating points (``config.task.template``).
PREFIX = "config."
#: Config keys (dotted; a key covers everything under it) that cannot change a point's numbers. ``seed``
#: is what seeds of one point differ in; the rest decide where things go and what is shown, not the numbers.
NON_NUMERIC_KEYS = (
    "seed",
    "logger", "report", "objective",  # where a point is logged; the report's verdict settings; a sweeper's target
    "progress", "eval.progress", "resume", "checkpoint_every_s",  # bars, resuming, checkpoints of a pass
    "save_selection", "export_model", "cache_dir",  # what is written, and where
    "baseline", "eval.baseline", "eval.log_samples", "eval.name",  # whether the unedited model runs; records; a label
    "eval.draft", "eval.draft_tokens",  # drafted greedy decoding gives undrafted decoding's tokens (docs/drafting.md)
    "point", "provenance",  # copies of the point fields and the code's version, not settings
)
_ABSENT = "<absent>"
_SHORT = 24


def _denied(key: str) -> bool:
    return any(key == k or key.startswith(k + ".") for k in NON_NUMERIC_KEYS)


def _flatten(node: Any, prefix: str, out: dict[str, str]) -> None:
    """``out[dotted key] = value as JSON`` for every leaf of ``node`` (a non-empty mapping is no leaf)."""
    if isinstance(node, Mapping) and node:
        for key, value in node.items():
            _flatten(value, f"{prefix}.{key}" if prefix else str(key), out)
    elif prefix:
        out[prefix] = json.dumps(node, sort_keys=True, default=str)


def point_identity(result: Mapping) -> dict[str, str]:
    """``{dotted config key: value as JSON}`` of everything in ``result["config"]`` that can change the
    point's numbers (the seed and :data:`NON_NUMERIC_KEYS` left out); ``{}`` for a result without a config."""
    config = result.get("config")
    if not isinstance(config, Mapping):
        return {}
    flat: dict[str, str] = {}
    _flatten(config, "", flat)
    return {k: v for k, v in flat.items() if not _denied(k)}


def identity_digest(result: Mapping) -> str:
    """A short stable hash of :func:`point_identity`: equal for seeds of one point."""
    blob = json.dumps(point_identity(result), sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


def short_value(value: str) -> str:
    """A config value (JSON) as a short, distinct cell: strings unquoted; a long or multi-line value as its
    first characters and a hash (two templates that share a beginning stay apart)."""
    try:
        plain = json.loads(value)
    except (TypeError, ValueError):
        plain = value
    text = plain if isinstance(plain, str) else value
    if len(text) <= _SHORT and "\n" not in text:
        return text
    digest = hashlib.sha1(value.encode()).hexdigest()[:6]
    return f"{text[:12].encode('unicode_escape').decode()}…#{digest}"


def split_keys(results: Sequence[Mapping], by: Sequence[str]) -> list[str]:
    """The config keys whose values differ between results that share the point fields ``by`` (and would be
    pooled as seeds of one point), sorted. A key a result lacks counts as a value of its own."""
    groups: dict[str, list[dict[str, str]]] = {}
    for result in results:
        point = result.get("point") or {}
        key = json.dumps([point.get(f) for f in by], sort_keys=True, default=str)
        groups.setdefault(key, []).append(point_identity(result))
    keys: set[str] = set()
    for members in groups.values():
        if len(members) < 2:
            continue
        for name in set().union(*members):
            if len({m.get(name, _ABSENT) for m in members}) > 1:
                keys.add(name)
    return sorted(keys)


def mark_identities(results: Iterable[MutableMapping], by: Sequence[str]) -> list[str]:
    """Write every :func:`split_keys` key into each result's point as ``config.<key>`` (a short value, see
    :func:`short_value`), in place: points that differ in one are then separate rows everywhere. Returns
    the fields added (``config.task.template``, ...); idempotent."""
    results = list(results)
    keys = split_keys(results, by)
    for result in results:
        identity = point_identity(result)
        point = dict(result.get("point") or {})
        for key in keys:
            point[PREFIX + key] = short_value(identity.get(key, json.dumps(_ABSENT)))
        result["point"] = point
    return [PREFIX + k for k in keys]


def identity_fields(rows: Iterable[Mapping]) -> list[str]:
    """The ``config.<key>`` fields of ``rows`` (first seen first): the keys :func:`mark_identities` added."""
    seen: dict[str, None] = {}
    for row in rows:
        for key in row:
            if key.startswith(PREFIX):
                seen.setdefault(key, None)
    return list(seen)
