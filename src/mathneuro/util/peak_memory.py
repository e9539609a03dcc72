"""Peak memory of this process, in windows that can be restarted (one per sweep point).

A Hydra multirun runs many points in one process. The process's high-water mark only grows, so
without a restart every point after the first reports the largest peak of all the points before
it. On Linux, writing ``5`` to ``/proc/self/clear_refs`` resets the resident high-water mark
(``VmHWM``); CUDA's peak allocation is reset by torch. Elsewhere the window is the process's life.
"""

from __future__ import annotations

import resource
import sys
from pathlib import Path

import torch

_STATUS = Path("/proc/self/status")
_CLEAR_REFS = Path("/proc/self/clear_refs")


def reset_peak_memory() -> bool:
    """Start a new peak window for resident and CUDA memory; False where the resident peak cannot be reset."""
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.reset_peak_memory_stats()
    try:
        _CLEAR_REFS.write_text("5")
        return True
    except OSError:  # not Linux, or /proc not writable (some sandboxes)
        return False


def peak_rss_mb() -> float:
    """Peak resident memory (MB) since the last :func:`reset_peak_memory`, else since the process started."""
    try:
        for line in _STATUS.read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # bytes on macOS, KiB elsewhere
    return maxrss / 2**20 if sys.platform == "darwin" else maxrss / 1024


def peak_memory_mb() -> dict[str, float]:
    """Peak resident memory (``rss_mb``) and, on CUDA, peak allocated GPU memory (``cuda_mb``) in this window."""
    peak = {"rss_mb": round(peak_rss_mb(), 1)}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        peak["cuda_mb"] = round(torch.cuda.max_memory_allocated() / 2**20, 1)
    return peak
