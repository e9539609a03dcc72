"""Hydra callbacks: before a multirun, check its method settings; when it ends, write its report and
(logger on) log it to W&B."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from mathneuro.pipeline.errors import ConfigError, SweepRefused
from mathneuro.pipeline.recording import WandbRun
from mathneuro.pipeline.sweep_check import check_multirun

log = logging.getLogger("mathneuro")


class MethodSettingsCheck(Callback):
    """Refuses, before any job runs, a ``method.<setting>`` that no method of the multirun has."""

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        try:
            check_multirun(config)
        except ConfigError as exc:
            raise SweepRefused(str(exc)) from None


class SweepReport(Callback):
    """Writes ``<sweep dir>/report/`` (CSV, markdown, figures) after every multirun; never fails the sweep.

    ``echo``: also print the scores and paired differences (:func:`mathneuro.report.console.console_report`);
    set by ``hydra.callbacks.sweep_report.echo=true`` (``experiment=demo`` does)."""

    def __init__(self, echo: bool = False) -> None:
        self.echo = echo

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        from mathneuro.report import (  # deferred: matplotlib, at sweep end only
            log_report_to_wandb,
            write_report,
        )
        from mathneuro.report.console import console_report  # deferred: the report package loads matplotlib

        sweep = Path(config.hydra.sweep.dir)
        settings = config.get("report") or {}  # report.margin, report.families: paired.csv's verdicts
        try:
            report = write_report(sweep, margin=settings.get("margin"), families=list(settings.get("families") or []))
        except Exception as exc:  # a report is a convenience: the sweep's results are already on disk
            log.warning("sweep report not written: %s", exc)
            return
        log.info("sweep report: %s", sweep / "report")
        if self.echo:
            print(console_report(report))
        logger = config.get("logger", {})
        if logger.get("name") == "wandb" and logger.get("log_report", True):
            run = WandbRun(True, init_timeout=logger.get("init_timeout", 30.0), project=logger.get("project"),
                           entity=logger.get("entity"), mode=logger.get("mode"), group=sweep.name, job_type="report",
                           name=f"report-{sweep.name}", dir=str(sweep / "report"))
            if run.run is not None:
                log_report_to_wandb(report, run.run)
            run.finish()
