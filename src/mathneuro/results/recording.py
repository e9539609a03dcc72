"""Recording sweep points: one W&B run per point (``results.json`` is written by :mod:`~mathneuro.results.schema`).

W&B is optional at every step: a failure to start, log or finish warns and never kills
the run. The default mode is offline (no account needed; ``wandb sync`` later). When an
online run cannot start (no network, bad key, server down) within ``init_timeout`` seconds,
the point logs to an offline run instead (same config, summary and tables) and every later
point of the process goes straight to offline. ``$WANDB_DIR``, when set, is where runs go.
"""

from __future__ import annotations

import logging
import os
import warnings
from pathlib import Path
from typing import Any

DEFAULT_INIT_TIMEOUT = 30.0  # seconds an online W&B run may take to start before we log offline

log = logging.getLogger("mathneuro")
_online_unavailable: str | None = None  # why online W&B failed in this process (then: offline at once)


class WandbRun:
    """One W&B run per sweep point; every call is a no-op after a failure (with one warning).

    ``init_timeout`` bounds the wait for an online run to start; if it cannot start, the run is
    made offline instead (``wandb sync`` uploads it later) and so is every later one in this process.
    """

    def __init__(self, enabled: bool, init_timeout: float = DEFAULT_INIT_TIMEOUT, verbose: bool = False,
                 **init_kwargs: Any):
        global _online_unavailable
        self.run = None
        self.offline_fallback = False
        self.verbose = verbose  # W&B's own banners and hints (off: the run's folder is logged once, by us)
        if not enabled:
            return
        if os.environ.get("WANDB_DIR"):
            init_kwargs.pop("dir", None)  # the user's choice wins over the run directory
        online = init_kwargs.get("mode", os.environ.get("WANDB_MODE")) == "online"
        if online and _online_unavailable is not None:
            log.warning("W&B: online unavailable earlier in this process (%s); logging this point offline",
                        _online_unavailable)
            init_kwargs["mode"], self.offline_fallback = "offline", True
        try:
            self.run = self._init(init_timeout, init_kwargs, verbose)
        except Exception as exc:  # W&B must never kill an experiment
            reason = " ".join(str(exc).split("Consider increasing")[0].split())[:300] or type(exc).__name__
            if not online or self.offline_fallback:
                warnings.warn(f"W&B disabled for this run: {reason}", stacklevel=2)
                return
            _online_unavailable = reason
            self.offline_fallback = True
            init_kwargs["mode"] = "offline"
            init_kwargs.pop("resume", None)  # the failed online start keeps its run id: the fallback gets its own
            init_kwargs.pop("id", None)
            try:
                self.run = self._init(init_timeout, init_kwargs, verbose)
            except Exception as exc2:
                warnings.warn(f"W&B disabled for this run: {exc2}", stacklevel=2)
                return
            log.warning("W&B: online run could not start (%s); logging this point offline to %s instead "
                        "(upload later with `wandb sync`); later points go offline at once",
                        reason, Path(self.run.dir).parent)

    @staticmethod
    def _init(init_timeout: float, init_kwargs: dict[str, Any], verbose: bool = False):
        import wandb

        kwargs = dict(init_kwargs)
        quiet = {} if verbose else {"silent": True}  # quiet=True still prints three lines per run
        kwargs.setdefault("settings", wandb.Settings(init_timeout=float(init_timeout), **quiet))
        return wandb.init(reinit="finish_previous", **kwargs)

    @property
    def where(self) -> str | None:
        """Where the run went: its folder (offline) or its URL (online); None without a run."""
        if self.run is None:
            return None
        url = getattr(self.run, "url", None) if not self.run.offline else None
        return url or str(Path(self.run.dir).parent)

    @property
    def told(self) -> str | None:
        """Where the run went, as a user reads it: the URL online; offline its folder and how to upload it."""
        if self.run is None:
            return None
        if not self.run.offline:
            return self.where
        return f"{self.where} (offline; upload it with `wandb sync {self.where}`)"

    def _safe(self, what: str, fn) -> None:
        if self.run is None:
            return
        try:
            fn()
        except Exception as exc:
            warnings.warn(f"W&B {what} failed: {exc}", stacklevel=3)

    def summary(self, values: dict[str, Any]) -> None:
        """Set summary metrics (stable names, e.g. ``math/gsm8k/exact_match``)."""
        self._safe("summary", lambda: self.run.summary.update(values))

    def config(self, values: dict[str, Any]) -> None:
        """Add to (or change) the run's config."""
        self._safe("config", lambda: self.run.config.update(values, allow_val_change=True))

    def log(self, values: dict[str, Any]) -> None:
        """Log one history row."""
        self._safe("log", lambda: self.run.log(values))

    def define_metrics(self, directions: dict[str, str]) -> None:
        """``define_metric`` per name, its summary the best value: ``max`` for ``"up"``, ``min`` for ``"down"``."""
        def _do():
            for name, direction in directions.items():
                self.run.define_metric(name, summary="max" if direction == "up" else "min")
        self._safe("define_metric", _do)

    def artifact(self, name: str, kind: str, metadata: dict[str, Any], files: dict[str, Path],
                 reference: Path | None = None) -> None:
        """Log an artifact of type ``kind``: ``files`` (name in the artifact -> path; read when the run
        syncs, not copied) and, for large folders (an exported model), a ``file://`` reference."""
        def _do():
            import wandb

            art = wandb.Artifact(name, type=kind, metadata=metadata)
            for inside, path in files.items():
                art.add_file(str(path), name=inside, policy="immutable")
            if reference is not None:
                art.add_reference(Path(reference).resolve().as_uri(), name=Path(reference).name)
            self.run.log_artifact(art)
        self._safe(f"artifact {name}", _do)

    def curve(self, values: dict[str, Any], step: int) -> None:
        """Log one point of a curve (e.g. ``intervention/loss`` at its training step, ``intervention/step``)."""
        def _do():
            if not getattr(self, "_curves", None):
                self._curves = True
                self.run.define_metric("intervention/*", step_metric="intervention/step")
            self.run.log({**values, "intervention/step": step})
        self._safe("log", _do)

    def table(self, key: str, columns: list[str], rows: list[list[Any]]) -> None:
        """Log a table (e.g. per-layer counts of the selection)."""
        def _do():
            import wandb

            self.run.log({key: wandb.Table(columns=columns, data=rows)})
        self._safe("table", _do)

    def finish(self, failed: bool = False, preempted: bool = False) -> None:
        """Finish the run: marked failed (exit code 1) when the point raised, and preempting first
        when it was interrupted (Ctrl-C, SIGTERM)."""
        if preempted:
            self._safe("mark_preempting", lambda: self.run.mark_preempting())
        self._safe("finish", lambda: self.run.finish(exit_code=1 if failed or preempted else 0))
        self.run = None
