"""Hydra callbacks: before a multirun, check its method and intervention settings; when it ends, write its report,
(logger on) log it to the sweep's W&B report run, and print the sweep's status line."""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from mathneuro.cli.sweep_status import status_line
from mathneuro.pipeline.errors import ConfigError, SweepRefused
from mathneuro.pipeline.sweep_check import check_multirun

log = logging.getLogger("mathneuro")


class MethodSettingsCheck(Callback):
    """Refuses, before any job runs, a ``method.<setting>`` (``intervention.<setting>``) that no method
    (intervention) of the multirun has."""

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        try:
            check_multirun(config)
        except ConfigError as exc:
            raise SweepRefused(str(exc)) from None


class SweepReport(Callback):
    """Writes ``<sweep dir>/report/`` (CSV, markdown, figures) after every multirun, logs it to the sweep's
    one W&B report run (logger on) and prints the sweep's status line; never fails the sweep.

    ``echo``: also print the scores and paired differences (:func:`mathneuro.report.console.console_report`);
    set by ``hydra.callbacks.sweep_report.echo=true`` (``experiment=demo`` does)."""

    def __init__(self, echo: bool = False) -> None:
        self.echo = echo
        self.started: float | None = None

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        self.started = time.time()

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        from mathneuro.report import write_report  # deferred: matplotlib, at sweep end only
        from mathneuro.report.console import console_report  # deferred: the report package loads matplotlib
        from mathneuro.report.not_made import asked, listing  # deferred: as above
        from mathneuro.report.wandb_run import log_report_run  # deferred: as above

        sweep = Path(config.hydra.sweep.dir)
        settings = config.get("report") or {}  # report.margin, report.families: paired.csv's verdicts
        try:
            report = write_report(sweep, margin=settings.get("margin"), families=list(settings.get("families") or []))
        except Exception as exc:  # a report is a convenience: the sweep's results are already on disk
            log.warning("sweep report not written: %s", exc)
            print(status_line(sweep, self.started, None))
            return
        log.info("sweep report: %s", sweep / "report")
        notes = asked(report.get("paired_notes") or [])
        if self.echo:
            print(console_report(report))  # its last part lists the comparisons not made
        elif notes:
            print(listing(notes))  # never only in summary.md
        logger = config.get("logger", {})
        if logger.get("name") == "wandb" and logger.get("log_report", True):
            experiment = (config.hydra.runtime.choices or {}).get("experiment")
            log_report_run(report, sweep, logger, experiment)
        print(status_line(sweep, self.started, sweep / "report", notes))
