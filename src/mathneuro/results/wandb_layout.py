"""How a sweep's W&B runs are laid out for comparison: one group per sweep, short names, tags to filter by.

- **Group**: the sweep's identity, ``<experiment or "sweep">-<date>_<time>`` (a single run: ``run-…``),
  the same for every point and for the sweep's report run, also when the sweep is resumed or its
  report rewritten. It is kept in ``<sweep dir>/.wandb_sweep.json`` together with the report run's id,
  written once by whichever process needs it first. ``logger.group`` replaces the group.
- **Name**: ``mathneuro K=0.05 s=1.1 seed=0`` (method, K as the fraction ``top_k`` is everywhere, the scalar or
  ``prune``, the seed),
  plus every other swept key's value (``filter=race``) so that names are unique within the sweep; at
  most 64 characters (longer ones are cut and end in a short hash). ``logger.run_name`` replaces it
  with a template over the point's fields (``"{method} K={K} {filter}"``).
- **Tags**: ``method=…``, ``intervention=…``, ``model=…``, ``task=…``, ``filter=…`` (one per filter set),
  ``K=…``, ``scalar=…``, ``seed=…``, ``eval=…`` and ``experiment=…`` when one is chosen, then ``logger.tags``.
- **job_type**: the method (``report`` for the report run).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import secrets
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

IDENTITY_FILE = ".wandb_sweep.json"
MAX_NAME = 64
MAX_TAG = 64  # W&B refuses longer tags
#: Override keys that the standard name already shows.
NAMED_KEYS = ("method", "method.name", "top_k", "intervention", "intervention.name", "intervention.scalar", "seed")
_STAMP = re.compile(r"(\d{4}-\d{2}-\d{2})[/_ T.-](\d{2}-\d{2}-\d{2})$")


def k_text(top_k: Any) -> str:
    """K as every output writes it: the fraction the config's ``top_k`` holds (``0.05``), the same in run
    names, tags, the report run's K axis, results.json and the CSVs."""
    try:
        return repr(float(top_k))
    except (TypeError, ValueError):
        return str(top_k)


def _stamp(folder: Path) -> str:
    """``<date>_<time>`` of a Hydra folder ``…/<date>/<time>`` or ``…/<date>_<time>`` (the sweep's start),
    else the time now (kept in the identity file, so it stays the sweep's)."""
    found = _STAMP.search(f"{folder.parent.name}/{folder.name}")
    if found:
        return f"{found.group(1)}_{found.group(2)}"
    return time.strftime("%Y-%m-%d_%H-%M-%S")


def sweep_identity(folder: str | os.PathLike, experiment: str | None = None, *, multirun: bool = True) -> dict:
    """``{"group", "report_run_id", "created"}`` of the sweep (or single run) in ``folder``: read from its
    :data:`IDENTITY_FILE`, else made and written there first (atomically; when two processes race, the
    first file wins and both return it). Without a writable folder the identity is returned unsaved."""
    folder = Path(folder)
    path = folder / IDENTITY_FILE
    try:
        data = json.loads(path.read_text())
        if isinstance(data, dict) and data.get("group") and data.get("report_run_id"):
            return data
    except (OSError, ValueError):
        pass
    prefix = experiment or ("sweep" if multirun else "run")
    data = {"group": f"{prefix}-{_stamp(folder)}", "report_run_id": f"report-{secrets.token_hex(5)}",
            "created": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    try:
        folder.mkdir(parents=True, exist_ok=True)
        tmp = folder / f".{IDENTITY_FILE}.{os.getpid()}.{secrets.token_hex(3)}.tmp"
        tmp.write_text(json.dumps(data, indent=1))
        try:
            os.link(tmp, path)  # fails when another process wrote it first: theirs is the identity
        except FileExistsError:
            data = json.loads(path.read_text())
        finally:
            tmp.unlink(missing_ok=True)
    except OSError:
        pass
    return data


def swept_values(folder: str | os.PathLike, job_overrides: Sequence[str]) -> dict[str, str]:
    """``{key: value}`` of this job's overrides whose key the sweep varies (read from Hydra's
    ``<sweep dir>/multirun.yaml``: the command line's sweeps and the sweeper's ``params``, as an
    experiment config sets them), other than those the standard name shows; ``{}`` when unknown."""
    path = Path(folder) / "multirun.yaml"
    if not path.is_file():
        return {}
    try:
        from hydra.core.override_parser.overrides_parser import OverridesParser
        from omegaconf import OmegaConf

        hydra = OmegaConf.load(path).hydra
        given = list(hydra.overrides.task)
        params = OmegaConf.select(hydra, "sweeper.params") or {}
        given += [f"{k}={v}" for k, v in params.items() if v is not None]
        parsed = OverridesParser.create().parse_overrides(given)
        swept = {o.get_key_element().lstrip("+~") for o in parsed if o.is_sweep_override()}
    except Exception:  # noqa: BLE001 - names only lose their extra keys
        return {}
    out = {}
    for item in job_overrides:
        key, _, value = item.lstrip("+~").partition("=")
        if key in swept and key not in NAMED_KEYS:
            out[key] = value
    return out


class _Fields(dict):
    def __init__(self, fields: Mapping[str, Any], **optional: Any) -> None:
        super().__init__({**optional, **fields})


def _fit(name: str, limit: int = MAX_NAME) -> str:
    if len(name) <= limit:
        return name
    digest = hashlib.sha1(name.encode()).hexdigest()[:6]
    return f"{name[: limit - 7].rstrip()}~{digest}"


def run_name(point: Mapping[str, Any], extras: Mapping[str, str] | None = None, template: str | None = None) -> str:
    """The W&B name of a point (see the module docstring)."""
    fields = {**point, "K": k_text(point.get("top_k"))}
    if template:
        try:  # a field this point lacks (``reference`` of a non-random point) is empty
            return _fit(template.format_map(_Fields(fields, reference="", share="")), 128)
        except (KeyError, IndexError, ValueError) as err:
            raise ValueError(f"logger.run_name: {template!r} names an unknown field ({err}); fields: "
                             f"{', '.join(sorted(fields))}") from None
    method = str(point.get("method"))
    if point.get("reference"):
        method += f"({point['reference']})"
    scalar = point.get("scalar")  # None for an intervention without one (prune, finetune, ...): its name instead
    edit = str(point.get("intervention")) if scalar is None or scalar == 0 else f"s={scalar}"
    parts = [method, f"K={fields['K']}", edit, f"seed={point.get('seed')}"]
    parts += [f"{k.rsplit('.', 1)[-1]}={v}" for k, v in (extras or {}).items()]
    return _fit(" ".join(parts))


def run_tags(point: Mapping[str, Any], *, eval_name: str | None = None, experiment: str | None = None,
             extra: Sequence[str] = ()) -> list[str]:
    """The tags of a point's run (see the module docstring), each at most 64 characters, no repeats."""
    tags = [f"method={point.get('method')}", f"intervention={point.get('intervention')}",
            f"model={point.get('model')}", f"task={point.get('task')}"]
    tags += [f"filter={f}" for f in str(point.get("filter") or "").split("+") if f]
    tags += [f"K={k_text(point.get('top_k'))}", f"scalar={point.get('scalar')}", f"seed={point.get('seed')}"]
    if eval_name:
        tags.append(f"eval={eval_name}")
    if experiment:
        tags.append(f"experiment={experiment}")
    tags += [str(t) for t in extra]
    return list(dict.fromkeys(t[:MAX_TAG] for t in tags))
