"""The sweep's one W&B report run: the report's tables, figures and paired differences, resumed on rewrite.

Its id is kept in the sweep's identity file (:func:`~mathneuro.results.wandb_layout.sweep_identity`), so a
resumed sweep or a later ``mathneuro-report --wandb-project`` logs into the same run, in the sweep's group.
Online, each point's own run also gets its paired differences in its summary.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from mathneuro.report.sweep import load_results
from mathneuro.report.wandb_log import log_report_to_wandb, update_point_summaries
from mathneuro.results.provenance import provenance
from mathneuro.results.recording import WandbRun
from mathneuro.results.wandb_layout import sweep_identity

log = logging.getLogger("mathneuro")


def sweep_logger(sweep: Path) -> dict[str, Any]:
    """The ``logger`` settings the sweep ran with (from Hydra's ``multirun.yaml``), ``{}`` when unknown."""
    path = Path(sweep) / "multirun.yaml"
    try:
        from omegaconf import OmegaConf

        node = OmegaConf.load(path).get("logger") if path.is_file() else None
        return dict(OmegaConf.to_container(node, resolve=False)) if node is not None else {}
    except Exception:  # noqa: BLE001 - defaults then
        return {}


def report_mode(sweep: Path, asked: str | None = None) -> str:
    """The W&B mode of a sweep's report run: ``asked``, else the mode its points ran with (``logger.mode`` in
    its ``multirun.yaml``), else offline (the project's default, which needs no account)."""
    return asked or str(sweep_logger(sweep).get("mode") or "offline")


def log_report_run(report: Mapping, sweep: Path, logger: Mapping[str, Any], experiment: str | None = None
                   ) -> str | None:
    """Log ``report`` to the sweep's one W&B report run: its id is kept in the sweep's identity file, so a
    rewrite (a resumed sweep, a later ``mathneuro-report``) resumes the same run. Returns where the run
    went (:attr:`~mathneuro.results.recording.WandbRun.told`: its URL, or its folder and ``wandb sync``),
    None when it could not start."""
    identity = sweep_identity(sweep, experiment)
    group = logger.get("group") or identity["group"]
    run = WandbRun(True, init_timeout=logger.get("init_timeout", 30.0), verbose=bool(logger.get("verbose", False)),
                   project=logger.get("project"), entity=logger.get("entity"), mode=logger.get("mode"), group=group,
                   job_type="report", name=f"report {group}"[:64], id=identity["report_run_id"], resume="allow",
                   tags=["report", *([f"experiment={experiment}"] if experiment else []), *(logger.get("tags") or [])],
                   config={"sweep_dir": str(sweep), "provenance": provenance()}, dir=str(sweep / "report"))
    if run.run is None:
        return None
    log_report_to_wandb(report, run.run)
    told = run.told
    log.info("W&B report run %r (id %s, group %s): %s", f"report {group}"[:64], run.run.id, group, told)
    run.finish()
    if logger.get("mode") == "online":
        try:
            update_point_summaries(load_results(sweep)[0], report.get("paired") or [])
        except Exception as exc:  # noqa: BLE001 - the report run holds the same numbers
            log.warning("W&B: the points' summaries were not updated with their paired differences: %s", exc)
    return told
