"""The only forward passes: statistics of calibration samples that every score is built from.

Every statistics kind asked for (:mod:`mathneuro.statistics.kinds`: the built-in ``linear_inputs``, per-linear
input norms, and ``activation_counts``, per-neuron counts of positive MLP activations, or a user's kind) is
collected in one batched, padding-aware pass over the decoder (no LM head).

Statistics depend only on the model, the sample texts and ``max_length``: never on top-K,
the scalar or the intervention, so they are computed once and cached (``mathneuro.statistics.cache``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from tqdm.auto import tqdm

from mathneuro.models.targets import base_model
from mathneuro.statistics.checkpoint import PassCheckpoint, PassState, restore, snapshot
from mathneuro.statistics.kinds import hooked_modules, kind_names, kind_spec
from mathneuro.util.padding import pad_token_id, right_padded


@dataclass
class Statistics:
    """Accumulated statistics of one kind over one sample set.

    ``tensors`` maps ``"<module>::<stat>"`` to a float32 (``norm``, ``sq``) or int64
    (``positive``) vector; ``num_samples`` and ``num_tokens`` count what was seen.
    """

    kind: str
    tensors: dict[str, torch.Tensor] = field(default_factory=dict)
    num_samples: int = 0
    num_tokens: int = 0
    meta: dict = field(default_factory=dict)

    def get(self, module: str, stat: str) -> torch.Tensor:
        """The ``stat`` vector (``norm``, ``sq`` or ``positive``) of ``module``."""
        try:
            return self.tensors[f"{module}::{stat}"]
        except KeyError:
            raise KeyError(f"no {stat!r} statistic for module {module!r} in {self.kind} statistics") from None

    def modules(self) -> list[str]:
        """Module names these statistics cover, in insertion order."""
        seen: dict[str, None] = {}
        for key in self.tensors:
            seen[key.rsplit("::", 1)[0]] = None
        return list(seen)


def masked_square_sums(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """[B, d] float32: Σ over each row's real tokens of x², for x [B, T, d] and mask [B, T] (1 = real)."""
    xf = x.to(torch.float32)
    xf = xf * xf if xf is x else xf.mul_(xf)  # never square the module's own input in place
    return torch.bmm(mask.to(torch.float32).unsqueeze(1), xf).squeeze(1)


def _fusable(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    xf = x.to(torch.float32)
    return (xf * xf * mask.to(torch.float32).unsqueeze(-1)).sum(dim=1)


_FUSED: dict[str, object] = {}

KERNELS = ("auto", "eager", "compiled")

#: Below this many scored weights, ``kernel="auto"`` stays eager: compiling costs more than it saves.
AUTO_COMPILE_MIN_WEIGHTS = 20_000_000


def square_sum_kernel(kernel: str, num_weights: int = 0, device: str | torch.device = "cpu"):
    """The function computing :func:`masked_square_sums`: eager, or one fused kernel (``torch.compile``,
    which reads each input once instead of three times; compiled once per process, dynamic shapes).

    ``auto`` compiles only for real-sized models on a CPU. On an H200 the eager ops were faster
    (a 1.5B bf16 pass at 1.90x a plain forward, against 2.22x compiled, plus 6 s of compiling)."""
    if kernel not in KERNELS:
        raise ValueError(f"statistics kernel: unknown {kernel!r}; allowed: {', '.join(KERNELS)}")
    small = num_weights < AUTO_COMPILE_MIN_WEIGHTS
    if kernel == "eager" or (kernel == "auto" and (small or torch.device(device).type != "cpu")):
        return masked_square_sums
    if "fn" not in _FUSED:
        _FUSED["fn"] = torch.compile(_fusable, dynamic=True)
    compiled = _FUSED["fn"]

    def fused(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        if _FUSED.get("failed"):
            return masked_square_sums(x, mask)
        try:
            return compiled(x, mask)
        except Exception as exc:  # no compiler / unsupported backend: the eager path gives the same numbers
            import warnings

            warnings.warn(f"fused statistics kernel unavailable, using eager ops: {exc}", stacklevel=2)
            _FUSED["failed"] = True
            return masked_square_sums(x, mask)

    return fused


@contextlib.contextmanager
def hooks(handles: list) -> Iterator[None]:
    """Remove every hook handle in ``handles`` on exit, whatever happens inside."""
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()
        handles.clear()


def tokenize(tokenizer, texts: Sequence[str], max_length: int) -> list[list[int]]:
    """Token ids of each text, truncated to ``max_length``; empty texts are refused."""
    ids = tokenizer(list(texts), add_special_tokens=True, truncation=True, max_length=max_length)["input_ids"]
    for i, row in enumerate(ids):
        if not row:
            raise ValueError(f"sample {i} tokenizes to nothing; empty samples cannot be scored")
    return ids


def length_sorted_batches(lengths: Sequence[int], batch_size: int) -> list[list[int]]:
    """Sample indices grouped into batches of similar length (longest first), to minimise padding."""
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    return [order[i : i + batch_size] for i in range(0, len(order), batch_size)]


def _input_device(model: nn.Module) -> torch.device:
    emb = model.get_input_embeddings() if hasattr(model, "get_input_embeddings") else None
    if emb is not None:
        return emb.weight.device
    return next(model.parameters()).device


def attach_accumulators(model: nn.Module, kinds: Sequence[str], handles: list, *, targets: dict | None = None,
                        activations: dict | None = None, kernel: str = "auto") -> dict[str, Any]:
    """``{kind: accumulator}`` for each registered kind in ``kinds``, its hooks added to ``handles``."""
    accumulators: dict[str, Any] = {}
    for name, modules in hooked_modules(model, kinds, targets, activations).items():
        spec = kind_spec(name)
        accumulators[name] = spec.factory(modules, kernel)
        handles += spec.attach(accumulators[name], modules)
    return accumulators


def live_state(accumulators: dict[str, Any]) -> dict[str, dict[str, torch.Tensor]]:
    """Every accumulator's live tensors by group (what a checkpoint saves); two kinds may not share a group."""
    live: dict[str, dict[str, torch.Tensor]] = {}
    for name, acc in accumulators.items():
        for group, tensors in acc.state().items():
            if group in live:
                raise ValueError(f"statistics kind {name!r}: its state group {group!r} is another kind's too")
            live[group] = tensors
    return live


def _resume(checkpoint: PassCheckpoint | None, live: dict, num_batches: int) -> tuple[int, int]:
    """Tokens counted and batches done that ``checkpoint`` holds for this pass, its accumulator state restored
    into ``live``; ``(0, 0)`` where there is none."""
    if checkpoint is None:
        return 0, 0
    state = checkpoint.load({f"{g}::{n}" for g, tensors in live.items() for n in tensors}, num_batches)
    if state is None:
        return 0, 0
    restore(live, state.tensors)
    return state.num_tokens, state.batches_done


def _feed(decoder: nn.Module, accumulators: dict, input_ids: torch.Tensor, attn: torch.Tensor,
          device: torch.device) -> int:
    """One batch through the decoder, each accumulator told its mask first; the batch's real tokens."""
    padded = bool((attn == 0).any())
    for acc in accumulators.values():
        acc.new_batch(attn.to(device), padded)
    decoder(input_ids=input_ids.to(device), attention_mask=attn.to(device), use_cache=False)
    return int(attn.sum())


@torch.no_grad()
def collect_statistics(
    model: nn.Module,
    tokenizer,
    texts: Sequence[str],
    *,
    kinds: Sequence[str] = ("linear_inputs",),
    targets: dict[str, nn.Linear] | None = None,
    activations: dict[str, nn.Module] | None = None,
    batch_size: int = 8,
    max_length: int = 512,
    progress: bool = True,
    desc: str = "statistics",
    kernel: str = "auto",
    checkpoint: PassCheckpoint | None = None,
) -> dict[str, Statistics]:
    """Run the decoder over ``texts`` once and return ``{kind: Statistics}`` for each requested kind.

    Batches are formed by sorted length with right padding; padded positions are excluded
    from every statistic. Hooks are removed when the pass ends, also on error. ``kernel``:
    ``eager`` ops, a ``compiled`` fused reduction, or ``auto`` (compiled for real-sized models).
    With a ``checkpoint`` the pass starts after the batches it holds and saves its progress into it
    (:mod:`mathneuro.statistics.checkpoint`); the statistics are bit-identical to an uninterrupted pass's.
    """
    kinds = kind_names(kinds)
    if batch_size < 1:
        raise ValueError(f"batch_size: must be >= 1, got {batch_size}")
    if not texts:
        raise ValueError("statistics: no samples given")
    handles: list = []
    accumulators = attach_accumulators(model, kinds, handles, targets=targets, activations=activations, kernel=kernel)
    ids = tokenize(tokenizer, texts, max_length)
    pad_id = pad_token_id(tokenizer)
    device = _input_device(model)
    decoder = base_model(model)
    batches = length_sorted_batches([len(r) for r in ids], batch_size)
    live = live_state(accumulators)
    num_tokens, start = _resume(checkpoint, live, len(batches))
    last: PassState | None = None  # the accumulators after the last finished batch (to save if interrupted)
    with hooks(handles):
        bar = tqdm(total=len(ids), desc=desc, unit="sample", disable=not progress,
                   initial=sum(len(b) for b in batches[:start]))
        try:
            for done, batch in enumerate(batches[start:], start + 1):
                num_tokens += _feed(decoder, accumulators, *right_padded([ids[i] for i in batch], pad_id), device)
                bar.update(len(batch))
                if checkpoint is not None and done < len(batches):
                    last = PassState(done, num_tokens, snapshot(live))
                    if checkpoint.due():
                        checkpoint.save(last, len(batches))
        except BaseException:  # interrupted (a timeout, preemption, Ctrl-C): keep what was finished
            if checkpoint is not None and last is not None and last.batches_done > checkpoint.saved:
                checkpoint.save(last, len(batches))
            raise
        finally:
            bar.close()
    meta = {"max_length": max_length, "num_samples": len(ids)}
    return {name: Statistics(name, acc.tensors(), len(ids), num_tokens, dict(meta))
            for name, acc in accumulators.items()}
