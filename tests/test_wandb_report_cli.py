"""``mathneuro-report SWEEP --wandb-project P``: the sweep's own W&B mode, one line saying where the run
went, W&B's warnings as one line each. Offline W&B in a temporary folder; no network."""

from __future__ import annotations

from pathlib import Path

import pytest

from mathneuro.cli import report as report_cli
from mathneuro.results.recording import WandbRun
from tests.test_report import sweep  # noqa: F401 - the fixture: a sweep folder of synthetic results
from tests.wandb_records import read_run


@pytest.mark.integration  # W&B's service and record reader are processes
def test_the_report_run_takes_the_sweeps_mode_and_says_where_it_went(tmp_path: Path, sweep: Path,  # noqa: F811
                                                                      monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    monkeypatch.delenv("WANDB_MODE", raising=False)  # W&B's own default would be online
    (sweep / "multirun.yaml").write_text("hydra: {}\nlogger:\n  name: wandb\n  mode: offline\n")
    assert report_cli.main([str(sweep), "--wandb-project", "mathneuro-test"]) == 0
    out, err = capsys.readouterr()
    (line,) = [ln for ln in out.splitlines() if ln.startswith("W&B report run: ")]
    folder = Path(line.split(": ", 1)[1].split(" (offline", 1)[0])
    assert folder.is_dir() and folder.is_relative_to(sweep) and f"`wandb sync {folder}`" in line, line
    assert read_run(folder).run["job_type"] == "report"
    assert "Warning" not in err, err


def test_a_report_run_that_cannot_start_is_one_warning_line_each(tmp_path: Path, sweep: Path,  # noqa: F811
                                                                 monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    def refuse(*args, **kwargs):
        raise RuntimeError("the W&B service\nwould not start")

    monkeypatch.setattr(WandbRun, "_init", staticmethod(refuse))
    assert report_cli.main([str(sweep), "--wandb-project", "mathneuro-test", "--wandb-mode", "offline"]) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["warning: W&B disabled for this run: the W&B service would not start",
                   "warning: the W&B report run could not start; nothing logged to W&B"], err
