"""The command line's messages: what a user can get wrong as one line, and signals as exceptions.

:func:`user_error` maps an exception a user caused (a config value of the wrong type, an
unknown config option, a bad override, a directory that cannot be written, a
:class:`~mathneuro.pipeline.errors.ConfigError`) to ``"<key>: <what is wrong and what is allowed>"``,
or None for a bug (which keeps its traceback); :func:`file_system_error` does the same for a full
disk, a read-only mount or a permission. :class:`Interrupted` is what SIGTERM (SLURM preemption)
raises in the CLI, so every ``finally`` block runs as on Ctrl-C.
"""

from __future__ import annotations

import errno
import os
import shutil
import signal
from pathlib import Path

from mathneuro.pipeline.errors import ConfigError

DEBUG_ENV = "MATHNEURO_DEBUG"

_TYPE_WORDS = {
    "Integer": "an integer",
    "Float": "a number",
    "Boolean": "true or false",
    "String": "a string",
    "Bytes": "bytes",
    "Path": "a path",
}


class Interrupted(KeyboardInterrupt):
    """A termination signal arrived (SIGTERM, as SLURM sends on preemption); ``signum`` says which."""

    def __init__(self, signum: int):
        super().__init__(f"interrupted by {signal.Signals(signum).name}")
        self.signum = signum


def debug_requested() -> bool:
    """True when the user asked for tracebacks (``MATHNEURO_DEBUG=1`` or ``HYDRA_FULL_ERROR=1``)."""
    names = (DEBUG_ENV, "HYDRA_FULL_ERROR")
    return any(os.environ.get(name, "").strip().lower() in ("1", "true", "yes") for name in names)


def raise_on_sigterm() -> None:
    """Make SIGTERM raise :class:`Interrupted` in the main thread (cleanup runs, as on Ctrl-C)."""

    def handler(signum, frame):  # noqa: ARG001 - signal handler signature
        raise Interrupted(signum)

    try:
        signal.signal(signal.SIGTERM, handler)
    except ValueError:  # not the main thread: leave the default
        pass


def _one_line(text: str) -> str:
    return " ".join(part.strip() for part in str(text).splitlines() if part.strip())


def _omegaconf_line(exc: Exception) -> str | None:
    """``key: message`` of an OmegaConf validation/key error (wrong type, unknown key, missing value)."""
    from omegaconf.errors import ConfigAttributeError, ConfigKeyError, MissingMandatoryValue, ValidationError

    key = getattr(exc, "full_key", None) or getattr(exc, "key", None)
    msg = str(getattr(exc, "msg", "") or exc).splitlines()[0].strip()
    if not key:
        return None
    if isinstance(exc, ValidationError):
        value = getattr(exc, "value", None)
        wanted = next((words for name, words in _TYPE_WORDS.items() if f"to {name}" in msg), None)
        if wanted is None and "not a valid bool" in msg:
            wanted = "true or false"
        if wanted is not None:
            return f"{key}: must be {wanted}, got {value!r}"
        return f"{key}: {msg}"
    if isinstance(exc, MissingMandatoryValue):
        return f"{key}: no value given; set {key}=..."
    if isinstance(exc, (ConfigKeyError, ConfigAttributeError)):
        return f"{key}: no such config key; check the spelling, or add a new key with +{key}=..."
    return f"{key}: {msg}"


def user_error(exc: BaseException) -> str | None:
    """One line ``key: what is wrong and what is allowed`` for an error the user caused, else None."""
    from hydra.errors import (
        ConfigCompositionException,
        MissingConfigException,
        OverrideParseException,
    )
    from omegaconf.errors import OmegaConfBaseException

    if isinstance(exc, ConfigError):
        return _one_line(exc)
    if isinstance(exc, MissingConfigException):
        missing = getattr(exc, "missing_cfg_file", None) or ""
        group, _, name = str(missing).rpartition("/")
        options = [o for o in (getattr(exc, "options", None) or []) if not o.endswith("_schema")]
        if group and options:
            return f"{group}: unknown option {name!r}; allowed: {', '.join(options)}"
        return f"{group or 'config'}: {_one_line(str(exc).split('Config search path')[0])}"
    if isinstance(exc, OverrideParseException):
        return f"overrides: {_one_line(exc)} (expected key=value)"
    if isinstance(exc, ConfigCompositionException):
        cause = exc.__cause__
        if isinstance(cause, OmegaConfBaseException):
            line = _omegaconf_line(cause)
            if line:
                return line
        text = str(exc)
        if text.startswith("Could not override '"):
            key = text.split("'")[1]
            return f"{key}: no such config key; add a new key with +{key}=..., or check the spelling"
        return f"config: {_one_line(text)}"
    if isinstance(exc, OmegaConfBaseException):
        return _omegaconf_line(exc)  # type: ignore[arg-type]
    if isinstance(exc, OSError) and exc.filename is not None:
        return framework_write_error(exc)
    return None


def framework_write_error(exc: OSError, multirun: bool = False) -> str:
    """One line for a file Hydra itself could not write (the run or sweep folder, its ``.hydra/`` config
    snapshot, ``multirun.yaml``, its log): ``hydra.run.dir`` (``hydra.sweep.dir`` with -m), the path,
    what the file system said, and what to do."""
    key = "hydra.sweep.dir" if multirun else "hydra.run.dir"
    what = FILE_SYSTEM_ERRNOS.get(exc.errno) or (exc.strerror or type(exc).__name__)
    told = f" ({exc.strerror})" if exc.strerror and exc.strerror.lower() != what.lower() else ""
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        hint = f"free space there or give another directory ({key}=...)"
    else:
        hint = f"give a writable directory ({key}=...)"
    return f"{key}: cannot write {str(exc.filename)!r}: {what}{told}; {hint}"


#: errno values that say the file system refused a write or a read (not a bug of ours).
FILE_SYSTEM_ERRNOS = {errno.ENOSPC: "the disk is full", errno.EDQUOT: "the disk quota is exceeded",
                      errno.EROFS: "the file system is read-only", errno.EACCES: "permission denied",
                      errno.EPERM: "operation not permitted", errno.EIO: "an I/O error",
                      errno.ENOENT: "no such file or directory", errno.ENOTDIR: "a path component is not a folder",
                      errno.EISDIR: "it is a folder", errno.ESTALE: "a stale network file handle"}


def file_system_error(exc: OSError) -> str | None:
    """``<path>: <what the file system said>; <what to do>`` for an OSError a point hit while reading or
    writing a file (disk full, read-only mount, permission), else None (a bug keeps its traceback)."""
    path = exc.filename
    if path is None and exc.errno not in FILE_SYSTEM_ERRNOS:
        return None
    what = FILE_SYSTEM_ERRNOS.get(exc.errno) or (exc.strerror or type(exc).__name__)
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        hint = "free space there (or point cache_dir / hydra.sweep.dir elsewhere) and rerun: finished work is kept"
    elif exc.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
        hint = "make it writable for this user (docs/scale-out.md: sharing a cache) or choose another folder"
    else:
        hint = "rerun when the file system is back: finished work is kept"
    return f"{path if path is not None else 'file system'}: {what} ({exc.strerror or exc}); {hint}"


#: What Hydra and a refused point leave in a run dir: nothing a user wants to keep (``.wandb_sweep.json``:
#: the W&B group and report run id a single run or a sweep would have used).
REFUSED_LEFTOVERS = (".hydra", ".attempts.json", ".running.lock", "wandb", ".wandb_sweep.json")


def remove_refused_run(run_dir: Path, sweep_dir: Path | None = None) -> None:
    """Remove the folder of a run refused before it did any work (it holds only Hydra's ``.hydra/``, its
    log and the refused point's bookkeeping), then ``sweep_dir`` when that holds only ``multirun.yaml``,
    then the parents this left empty, up to the working directory. Anything else is left alone."""
    run_dir = Path(run_dir).absolute()
    if not _only_leftovers(run_dir, REFUSED_LEFTOVERS):
        return
    shutil.rmtree(run_dir, ignore_errors=True)
    top = run_dir.parent
    if sweep_dir is not None and _only_leftovers(Path(sweep_dir).absolute(), ("multirun.yaml", ".wandb_sweep.json")):
        shutil.rmtree(sweep_dir, ignore_errors=True)
        top = Path(sweep_dir).absolute().parent
    cwd = Path.cwd().absolute()
    while top != cwd and top.is_relative_to(cwd):
        try:
            top.rmdir()  # only an empty folder
        except OSError:
            break
        top = top.parent


def remove_snapshot_leftovers(failed: str | os.PathLike, multirun: bool = False) -> None:
    """After Hydra could not write ``failed`` (its ``.hydra/`` snapshot or ``multirun.yaml``), remove the
    run or sweep folder it was making when that holds nothing else, so no partial file is left."""
    failed = Path(failed).absolute()
    if failed.parent.name == ".hydra":
        run_dir = failed.parent.parent
        remove_refused_run(run_dir, run_dir.parent if multirun else None)
    elif failed.name == "multirun.yaml" and _only_leftovers(failed.parent, ("multirun.yaml",)):
        shutil.rmtree(failed.parent, ignore_errors=True)


def _only_leftovers(folder: Path, names: tuple[str, ...]) -> bool:
    try:
        entries = list(folder.iterdir())
    except OSError:
        return False
    return all(e.name in names or (e.suffix == ".log" and e.is_file()) for e in entries)
