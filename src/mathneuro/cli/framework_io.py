"""The framework's own writes, named when they fail: Hydra's config snapshot, ``multirun.yaml`` and its log.

Hydra writes ``.hydra/config.yaml``, ``hydra.yaml``, ``overrides.yaml`` (and a sweep's ``multirun.yaml``)
before our task runs; on a full disk the error comes from closing the file, and an ``OSError`` raised
there carries no file name. :func:`track_writes` remembers, per thread, the last file opened for writing
(an audit hook on ``open``), so :func:`last_written` names it. Hydra's log file (``<run dir>/<job>.log``)
is written by :mod:`logging`, which swallows write errors; :func:`guard_log_files` makes the first failed
write of a log file raise an ``OSError`` naming the file instead (in the main thread; the handler is then
dropped, so the lines that follow go to the console only).
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import sys
import threading

_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC
_last = threading.local()
_installed: list[bool] = []


#: errno values of a refused write: only these are attributed to the last file written.
WRITE_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM, errno.EIO, errno.EFBIG}


def _audit(event: str, args: tuple) -> None:
    if event != "open" or not args:
        return
    try:  # an audit hook's error would fail the open itself: never let one out
        path, mode = args[0], args[1] if len(args) > 1 else None
        flags = args[2] if len(args) > 2 and isinstance(args[2], int) else 0
        writing = any(c in mode for c in "wax+") if isinstance(mode, str) else bool(flags & _WRITE_FLAGS)
        if writing and isinstance(path, (str, bytes, os.PathLike)):
            _last.path = os.fsdecode(path)
    except Exception:  # noqa: BLE001, S110 - e.g. at interpreter shutdown
        pass


def track_writes() -> None:
    """Start remembering the last file each thread opened for writing (once per process)."""
    if not _installed:
        sys.addaudithook(_audit)
        _installed.append(True)


def last_written() -> str | None:
    """The last file this thread opened for writing since :func:`track_writes`, else None."""
    return getattr(_last, "path", None)


def named(exc: OSError) -> OSError:
    """``exc`` itself when it names a file, else (a refused write: :data:`WRITE_ERRNOS`) the same error naming
    :func:`last_written`."""
    if exc.filename is not None or exc.errno not in WRITE_ERRNOS or last_written() is None:
        return exc
    return OSError(exc.errno, exc.strerror or str(exc), last_written())


def _raise_on_failed_write(handler: logging.FileHandler, logger: logging.Logger) -> None:
    def handle_error(record: logging.LogRecord) -> None:  # noqa: ARG001 - logging's signature
        exc = sys.exc_info()[1]
        if not isinstance(exc, OSError) or threading.current_thread() is not threading.main_thread():
            return  # another thread's line is lost, as logging does; the main thread's next line raises
        logger.removeHandler(handler)
        with contextlib.suppress(OSError, ValueError):  # what it holds unwritten is dropped with it
            handler.close()
        raise OSError(exc.errno, exc.strerror or str(exc), handler.baseFilename) from None

    handler.handleError = handle_error  # type: ignore[method-assign]


def guard_log_files(logger: logging.Logger | None = None) -> None:
    """Make a failed write of each file handler of ``logger`` (default: the root logger, where Hydra puts
    its ``<job>.log``) raise an OSError naming its file, once (see the module docstring)."""
    logger = logger or logging.getLogger()
    for handler in logger.handlers:
        if isinstance(handler, logging.FileHandler) and not getattr(handler, "_mathneuro_guarded", False):
            _raise_on_failed_write(handler, logger)
            handler._mathneuro_guarded = True  # type: ignore[attr-defined]


def one_copy_of_library_logs(names: tuple[str, ...] = ("huggingface_hub",)) -> None:
    """Drop the console handler a library gives its own logger while its lines also reach Hydra's (the
    root's): each of its warnings (a Hub retry) then prints once, in Hydra's format, and goes to the log."""
    for name in names:
        logger = logging.getLogger(name)
        if not logger.propagate:
            continue
        for handler in list(logger.handlers):
            if type(handler) is logging.StreamHandler:
                logger.removeHandler(handler)
