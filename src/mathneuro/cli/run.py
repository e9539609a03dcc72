"""The ``mathneuro`` command: Hydra composes ``conf/``; every (sweep) job runs :func:`run_point`.

Every error a user can cause (a bad config value or type, an unknown option, a missing model,
an unwritable directory, a damaged model file) ends the command with exit code 2 and one line
``mathneuro: error: <key>: <what is wrong and what is allowed>``; ``MATHNEURO_DEBUG=1`` or
``HYDRA_FULL_ERROR=1`` also print the traceback. SIGTERM (SLURM preemption) interrupts like
Ctrl-C: the unfinished point cleans up and leaves nothing partial but what a next attempt resumes
from (a statistics checkpoint, finished evaluation tasks). In a submitit job (``hydra/launcher=slurm``)
SIGTERM saves a statistics checkpoint and the job runs on until SLURM kills or requeues it. The job's
return value is the sweep objective, so an Optuna sweeper can optimise it.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import time
import traceback
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from mathneuro.cli.errors import (
    debug_requested,
    file_system_error,
    framework_write_error,
    raise_on_sigterm,
    remove_refused_run,
    remove_snapshot_leftovers,
    user_error,
)
from mathneuro.cli.framework_io import guard_log_files, named, one_copy_of_library_logs, track_writes
from mathneuro.cli.sweep_status import failed_sweep_line
from mathneuro.pipeline.config import ConfigError, register_configs
from mathneuro.pipeline.errors import SweepRefused
from mathneuro.pipeline.runner import run_point
from mathneuro.results.wandb_layout import swept_values
from mathneuro.util.signals import checkpoint_on_sigterm

log = logging.getLogger("mathneuro")


def config_dir() -> str:
    """Where the configs are: ``$MATHNEURO_CONF``, else the repository's top-level ``conf/`` (a
    clone, editable install), else the copy a wheel ships as the package ``mathneuro.conf``.

    Users add their own groups and experiments on top with Hydra's ``--config-dir DIR``.
    """
    env = os.environ.get("MATHNEURO_CONF")
    if env:
        return str(Path(env).expanduser().resolve())
    package = Path(__file__).resolve().parents[1]  # src/mathneuro (or site-packages/mathneuro)
    repo = package.parents[1] / "conf"
    if (repo / "config.yaml").exists() and (repo.parent / "pyproject.toml").exists():
        return str(repo)
    packaged = package / "conf"
    if (packaged / "config.yaml").exists():
        return str(packaged)
    return str(packaged)  # Hydra then says "Primary config directory not found" with this path


def job_dirname(override_dirname: str, max_len: int = 200) -> str:
    """A sweep point's directory name from its overrides, the same every time (so reruns resume).

    Hydra escapes a ``:`` in a value as ``\\:``; it is read back, so that an import path
    (``intervention.name=my_interventions:shuffle``) shows as written. Path-valued overrides (and any
    with another escape) are left out of the readable part, and a hash of the full override
    string is appended whenever anything was left out or cut, so names stay distinct.
    """
    import hashlib

    items = [item.replace("\\:", ":") for item in override_dirname.split(",") if item]
    readable = [item for item in items if "/" not in item and "\\" not in item]
    name = ",".join(readable) or "default"
    if len(readable) < len(items) or len(name) > max_len:
        digest = hashlib.sha1(override_dirname.encode()).hexdigest()[:10]
        name = f"{name[: max_len - 11]}-{digest}"
    return name


def format_table(results: dict) -> str:
    """A short plain-text table: each metric before and after the edit, and the selection size."""
    sel, point = results["selection"], results["point"]
    edit = (f"scalar={point['scalar']}" if point.get("scalar") is not None
            else f"intervention={point.get('intervention')}")
    head = f"method={point['method']} top_k={point['top_k']} {edit}: "
    # neurons: a share of neurons, and the weights they feed
    if sel.get("num_weights_edited") not in (None, sel["num_selected"]):
        head += (f"{sel['num_selected']:,} neurons selected ({100 * (sel.get('fraction_of_scored') or 0):.3f}% of the "
                 f"MLP neurons); {sel['num_weights_edited']:,} weights edited "
                 f"({100 * (sel.get('fraction_of_model_edited') or 0):.3f}% of the model)")
    else:
        head += f"{sel['num_selected']:,} weights selected ({100 * (sel['fraction_of_model'] or 0):.3f}% of the model)"
    lines = [head]
    metrics, base = results.get("metrics", {}), results.get("baseline_metrics", {})
    names = [k for k in metrics if not k.endswith("_stderr")]
    if names:
        width = max(len(n) for n in names)
        lines.append(f"{'metric':{width}s}  {'before':>8s}  {'after':>8s}")
        for name in names:
            before = base.get(name)
            before_s = f"{before:8.4f}" if isinstance(before, (int, float)) else f"{'-':>8s}"
            lines.append(f"{name:{width}s}  {before_s}  {metrics[name]:8.4f}")
    return "\n".join(lines)


_SWEEP_DIR: list[str] = []  # a multirun's folder, as its first job saw it (for the status line of a failed sweep)
_STARTED: list[float] = []  # when the command started (the status line of a failed sweep)
_TASK_ERRORS: list[BaseException] = []  # what points raised: an OSError not among them came from Hydra's setup
_DEBUG = False  # MATHNEURO_DEBUG=1 or HYDRA_FULL_ERROR=1 as the user set it


def _exit_user_error(line: str) -> None:
    """Print the one error line (after the traceback when debugging) and exit with code 2."""
    if _DEBUG:
        traceback.print_exc()
    print(f"mathneuro: error: {line}", file=sys.stderr)
    sys.exit(2)


def _task(cfg: DictConfig) -> float:
    from omegaconf.errors import OmegaConfBaseException

    hc = HydraConfig.get()
    output_dir = hc.runtime.output_dir
    guard_log_files()  # a log line the disk refuses ends the point with one line naming the log
    one_copy_of_library_logs()  # a Hub warning once, not also through huggingface_hub's own handler
    if os.environ.get("SUBMITIT_EXECUTOR"):  # a submitit job: SIGTERM (requeue, preemption) saves progress first
        checkpoint_on_sigterm()
    multirun = hc.mode == RunMode.MULTIRUN
    if multirun and not _SWEEP_DIR:
        _SWEEP_DIR.append(str(hc.sweep.dir))
    experiment = hc.runtime.choices.get("experiment")
    layout = {"experiment": experiment, "sweep_dir": str(hc.sweep.dir) if multirun else None,
              "extras": swept_values(hc.sweep.dir, list(hc.overrides.task)) if multirun else {}}
    try:
        resolved = OmegaConf.to_container(cfg, resolve=True)
        results = run_point(OmegaConf.to_object(cfg), output_dir, resolved_config=resolved, layout=layout,
                            overrides=list(hc.overrides.task), in_sweep=multirun,
                            sweep_dir=hc.sweep.dir if multirun else output_dir)
    except (ConfigError, OmegaConfBaseException) as exc:
        line = user_error(exc)
        if line is None:
            raise
        remove_refused_run(Path(output_dir), Path(hc.sweep.dir) if hc.mode == RunMode.MULTIRUN else None)
        _exit_user_error(line)
    except OSError as exc:  # a full disk, a read-only mount: one line, without Hydra's "Error executing job"
        line = file_system_error(exc)
        if line is None:
            _TASK_ERRORS.append(exc)
            raise
        if _SWEEP_DIR:  # Hydra stops a sweep whose point failed before its end callbacks
            print(failed_sweep_line(_SWEEP_DIR[0], _STARTED[0] if _STARTED else time.time()), file=sys.stderr)
        _exit_user_error(line)
    except BaseException as exc:
        _TASK_ERRORS.append(exc)
        raise
    if results.get("running_elsewhere") is not None:
        holder = results["running_elsewhere"]
        print(f"{output_dir}: running in another process (host {holder.get('host')}, pid {holder.get('pid')}), skipped")
    elif results.get("skipped"):
        print(f"{output_dir}: already complete, skipped")
    else:
        print(format_table(results))
        print(f"results: {Path(output_dir) / 'results.json'}")
    objective = results.get("objective")
    return float(objective) if objective is not None else float("nan")


OPEN_MAPPINGS = ("eval.limits.",)  # config mappings whose keys are free (any task name)


def open_mapping_overrides(args: list[str]) -> list[str]:
    """``eval.limits.<task>=N`` -> ``++eval.limits.<task>=N``: keys of open mappings need no ``+``, whether or
    not the composed config already has them (Hydra's struct mode would refuse a new key otherwise)."""
    out = []
    for arg in args:
        if arg.startswith(OPEN_MAPPINGS) and "=" in arg:
            arg = "++" + arg
        out.append(arg)
    return out


def cfg_in_multirun(args: list[str]) -> str | None:
    """The one line for ``--cfg`` (or ``--info``) given with ``-m``, which Hydra refuses with a traceback:
    they print one job's config, so the line says to drop ``-m`` and keep one value of each swept key."""
    flags = {a.split("=", 1)[0] for a in args if a.startswith("-")}
    asked = sorted(flags & {"--cfg", "-c", "--info", "-i"})
    if not asked or not flags & {"-m", "--multirun"}:
        return None
    swept = [a for a in args if "=" in a and not a.startswith("-") and "," in a.split("=", 1)[1]
             and not a.split("=", 1)[1].startswith(("[", "{", "'", '"'))]
    example = " ".join(f"{a.split('=', 1)[0]}={a.split('=', 1)[1].split(',')[0]}" for a in swept)
    return (f"{asked[0]}: shows the config of one job, not of a sweep (-m); drop -m"
            + (f" and give one value of each swept key, e.g. {example}" if example else ""))


def _multirun(args: list[str]) -> bool:
    return any(a in ("-m", "--multirun") or a.replace(" ", "") == "hydra.mode=MULTIRUN" for a in args)


def main() -> None:
    """Console entry point (``mathneuro`` and ``python -m mathneuro``)."""
    sys.argv[1:] = open_mapping_overrides(sys.argv[1:])
    refused = cfg_in_multirun(sys.argv[1:])
    if refused:
        print(f"mathneuro: error: {refused}", file=sys.stderr)
        sys.exit(2)
    register_configs()
    if not OmegaConf.has_resolver("mathneuro_dirname"):
        OmegaConf.register_new_resolver("mathneuro_dirname", job_dirname)
    global _DEBUG
    _DEBUG = debug_requested()
    logging.raiseExceptions = False  # a log file on a full disk must not print a traceback per line
    logging.getLogger("matplotlib").setLevel(logging.WARNING)  # not its INFO "generated new fontManager"
    # Hydra re-raises instead of printing its multi-line report; we print one line (or the traceback).
    os.environ["HYDRA_FULL_ERROR"] = "1"
    raise_on_sigterm()
    track_writes()  # Hydra's own writes (config snapshot, multirun.yaml) are named when the disk refuses them
    started = time.time()
    _STARTED[:] = [started]
    try:
        hydra.main(version_base="1.3", config_path=config_dir(), config_name="config")(_task)()
    except SweepRefused as exc:  # a multirun refused before any job (pipeline.sweep_check)
        _exit_user_error(str(exc))
    except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM turned into errors.Interrupted
        signum = getattr(exc, "signum", signal.SIGINT)
        if _DEBUG:
            traceback.print_exc()
        print(f"mathneuro: interrupted by {signal.Signals(signum).name}: the unfinished point left no partial "
              "results or cache entries, only what a rerun resumes from; rerun the same command to complete it",
              file=sys.stderr)
        sys.exit(128 + signum)
    except Exception as exc:
        from_point = any(exc is e for e in _TASK_ERRORS)
        if from_point and _SWEEP_DIR:  # Hydra stops a sweep whose point failed before its end callbacks
            print(failed_sweep_line(_SWEEP_DIR[0], started), file=sys.stderr)
        if from_point and isinstance(exc, OSError):
            line = file_system_error(exc)
        elif isinstance(exc, OSError) and named(exc).filename is not None:  # Hydra's own files
            line = framework_write_error(named(exc), multirun=_multirun(sys.argv[1:]))
            remove_snapshot_leftovers(named(exc).filename, multirun=_multirun(sys.argv[1:]))
        else:
            line = user_error(exc)
        if line is None:
            raise
        _exit_user_error(line)


if __name__ == "__main__":
    main()
