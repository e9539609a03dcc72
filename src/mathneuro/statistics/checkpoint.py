"""Checkpoints of a statistics pass, so that a pass cut short (a SLURM timeout or preemption) resumes.

A pass adds one batch at a time into small accumulators (a vector per scored module); what it has
done is those vectors, the number of batches done and the token count. :class:`PassCheckpoint` keeps
that state in one safetensors file (its metadata says which pass and how far), written atomically:
every ``every_s`` seconds, at the first batch boundary after a checkpoint request (SIGTERM, which SLURM
sends before it kills a requeued or preempted job: :mod:`mathneuro.util.signals`), and when the
pass is interrupted by an exception (then the state of the last finished batch is written, never a
half-added batch). A resumed pass starts after the last saved batch; batches are formed the same
way and added in the same order, so its statistics are bit-identical to those of an uninterrupted
pass. A file that cannot be read or does not match the pass (other modules, shapes, batch count)
is a miss, with a one-line warning. The caller deletes the file once the pass's result is stored.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import save_file

from mathneuro.util.io import atomic_write, remove_orphaned_temps
from mathneuro.util.signals import checkpoint_requested

FORMAT = 1
DEFAULT_EVERY_S = 10.0  # seconds between checkpoints of a running pass

log = logging.getLogger("mathneuro")

@dataclass
class PassState:
    """How far a pass got: ``batches_done`` batches added into ``tensors`` (``<group>::<module>`` ->
    accumulator), ``num_tokens`` real tokens seen."""

    batches_done: int
    num_tokens: int
    tensors: dict[str, torch.Tensor] = field(default_factory=dict)


def snapshot(live: Mapping[str, Mapping[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """A copy of every accumulator, named ``<group>::<module>`` (``live``: group -> module -> tensor)."""
    return {f"{group}::{name}": t.detach().clone() for group, tensors in live.items() for name, t in tensors.items()}


def restore(live: Mapping[str, dict[str, torch.Tensor]], tensors: Mapping[str, torch.Tensor]) -> None:
    """Put saved accumulators back: copied into the live tensor where it exists, else added as is."""
    for key, saved in tensors.items():
        group, name = key.split("::", 1)
        target = live[group].get(name)
        if target is None:
            live[group][name] = saved.clone()
        else:
            target.copy_(saved.to(target.device, target.dtype))


class PassCheckpoint:
    """The checkpoint file of one pass (``path``), identified by ``identity`` (what the pass computes)."""

    def __init__(self, path: str | os.PathLike, identity: Mapping, every_s: float = DEFAULT_EVERY_S):
        self.path = Path(path)
        self.identity = json.loads(json.dumps(dict(identity), sort_keys=True, default=str))
        self.every_s = float(every_s)
        self._last_save = time.monotonic()
        self.resumed_from = 0  # batches a pass skipped because this checkpoint had them
        self.saved = 0  # batches_done of the last save

    def load(self, names: set[str] | None, num_batches: int) -> PassState | None:
        """The saved state if it is this pass's and whole (``names``: the accumulators the pass expects,
        None when some are created lazily), else None (a damaged or foreign file is a miss, with a warning)."""
        if not self.path.exists():
            return None
        try:
            with safe_open(str(self.path), framework="pt") as handle:
                meta = dict(handle.metadata() or {})
                tensors = {k: handle.get_tensor(k) for k in handle.keys()}
            info = json.loads(meta.get("checkpoint", "{}"))
            if info.get("format") != FORMAT or info.get("identity") != self.identity:
                raise ValueError("it belongs to another pass")
            done, total = int(info["batches_done"]), int(info["num_batches"])
            if total != num_batches or not 0 < done <= num_batches:
                raise ValueError(f"{done} of {total} batches done, this pass has {num_batches}")
            shapes = info.get("shapes", {})
            if set(shapes) != set(tensors) or any(list(t.shape) != shapes[k] for k, t in tensors.items()):
                raise ValueError("its tensors differ from its metadata")
            if names is not None and not set(tensors) >= names:
                raise ValueError("it lacks accumulators of this pass")
        except Exception as exc:  # noqa: BLE001 - unreadable, truncated or foreign: start over
            reason = " ".join(str(exc).split()) or type(exc).__name__
            log.warning("statistics checkpoint %s is damaged or does not match (%s); starting the pass over",
                        self.path, reason)
            return None
        self.resumed_from = self.saved = done
        log.info("statistics pass resumes from its checkpoint: %d of %d batches done", done, num_batches)
        return PassState(done, int(info["num_tokens"]), tensors)

    def due(self) -> bool:
        """Whether a save is due now: ``every_s`` seconds since the last one, or one was requested."""
        return checkpoint_requested() or time.monotonic() - self._last_save >= self.every_s

    def save(self, state: PassState, num_batches: int) -> None:
        """Write ``state`` atomically (tensors and the metadata that identifies them, in one file)."""
        tensors = {k: v.detach().to("cpu").contiguous() for k, v in state.tensors.items()}
        info = {"format": FORMAT, "identity": self.identity, "batches_done": state.batches_done,
                "num_batches": num_batches, "num_tokens": state.num_tokens,
                "shapes": {k: list(v.shape) for k, v in tensors.items()}}
        self._last_save = time.monotonic()
        try:
            atomic_write(self.path, lambda tmp: save_file(tensors, tmp, metadata={"checkpoint": json.dumps(info)}))
        except OSError as exc:  # a checkpoint only saves time: go on without it
            log.warning("statistics checkpoint not saved (%s: %s); the pass goes on without one", exc.filename,
                        exc.strerror or exc)
            return
        self.saved = state.batches_done

    def clear(self) -> None:
        """Delete the checkpoint (its pass's result is stored), and any half-written one a killed attempt
        left (only the holder of the pass's locks writes or clears it)."""
        self.path.unlink(missing_ok=True)
        remove_orphaned_temps(self.path)
