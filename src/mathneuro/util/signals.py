"""What a stop signal asks of running work: SIGTERM, which SLURM sends a job before it kills it
(``scontrol requeue``, preemption, ``scancel``), becomes a request to save a checkpoint at once.

:func:`request_checkpoint` sets a flag that a running statistics pass reads at its next batch boundary
(:func:`checkpoint_requested`, see :mod:`mathneuro.statistics.checkpoint`); :func:`checkpoint_on_sigterm`
installs a SIGTERM handler that sets it, then hands the signal to the handler installed before (in a
submitit job: submitit's, which logs it and lets the job run on until SLURM's kill). Standard library
only, so the CLI can import it without torch.
"""

from __future__ import annotations

import os
import signal
import threading

_requested = threading.Event()


def request_checkpoint() -> None:
    """Ask a running pass to save its checkpoint at its next batch boundary (safe in a signal handler)."""
    _requested.set()


def checkpoint_requested() -> bool:
    """Whether a checkpoint was requested since the last call (the request is consumed)."""
    if _requested.is_set():
        _requested.clear()
        return True
    return False


def checkpoint_on_sigterm() -> None:
    """Let SIGTERM request a checkpoint, then reach the handler installed before (main thread only)."""
    try:
        previous = signal.getsignal(signal.SIGTERM)
    except ValueError:
        return
    if getattr(previous, "_mathneuro_checkpoint", False):
        return  # installed already (a second point in the same job)

    def handler(signum, frame):
        request_checkpoint()
        if callable(previous):
            previous(signum, frame)
        elif previous == signal.SIG_DFL:  # what SIGTERM would have done: end the process
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)

    handler._mathneuro_checkpoint = True  # type: ignore[attr-defined]
    try:
        signal.signal(signal.SIGTERM, handler)
    except ValueError:  # not the main thread
        pass
