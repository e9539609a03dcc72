"""The results schema of one sweep point (``results.json``) and its flat row.

The runner writes it; reports, analyses and W&B read it through this module only.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

POINT_FIELDS = ("model", "task", "filter", "method", "top_k", "intervention", "scalar", "seed", "num_samples")
SELECTION_FIELDS = ("num_selected", "num_scored", "num_parameters", "fraction_of_model", "fraction_of_scored")
SELECTION_COLUMNS = tuple(f"selection/{f}" for f in SELECTION_FIELDS)  # the runner's W&B summary names


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def tidy_row(result: Mapping) -> dict:
    """One flat row of a result: point fields, ``job``, ``objective``, ``selection/<number>``, every metric, the
    baseline metrics as ``baseline/<m>``, relative changes ``delta/<m>`` = (after - before) / before
    (only where before is a non-zero number), and ``per_layer/<block>`` / ``per_module/<type>``."""
    row: dict[str, Any] = dict(result.get("point") or {})
    if "_job" in result:
        row["job"] = result["_job"]
    selection = result.get("selection") or {}
    for key in SELECTION_FIELDS:
        if key in selection:
            row[f"selection/{key}"] = selection[key]
    if _is_number(result.get("objective")):
        row["objective"] = result["objective"]
    metrics = result.get("metrics") or {}
    baseline = result.get("baseline_metrics") or {}
    for name, value in metrics.items():
        row[name] = value
    for name, value in baseline.items():
        row[f"baseline/{name}"] = value
    for name, after in metrics.items():
        before = baseline.get(name)
        if "_stderr" in name.rsplit("/", 1)[-1]:
            continue  # a relative change of a standard error means nothing
        if _is_number(after) and _is_number(before) and before != 0:
            row[f"delta/{name}"] = (after - before) / before
    for key, count in (selection.get("per_layer") or {}).items():
        row[f"per_layer/{key}"] = count
    for key, count in (selection.get("per_module") or {}).items():
        row[f"per_module/{key}"] = count
    return row
