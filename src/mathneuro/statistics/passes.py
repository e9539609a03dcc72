"""The only forward passes: statistics of calibration samples that every score is built from.

Two kinds, collected in one batched, padding-aware pass over the decoder (no LM head):

- ``linear_inputs``: per scored linear and input column j, over samples s,
  ``norm[j] = Σ_s ||X_s[:, j]||₂`` (MathNeuro, docs/method.md#1-importance-of-a-weight) and ``sq[j] = Σ_s Σ_t X_s[t, j]²``
  (Wanda proper). Both are float32 whatever the model dtype.
- ``activation_counts`` (old name ``lape``): per MLP activation module and neuron n, the number of real tokens on which the
  activation output is > 0, plus the token count (LAPE, docs/method.md#4-baselines).

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

from mathneuro.models.targets import base_model, find_mlp_activations, find_target_linears
from mathneuro.statistics.checkpoint import PassCheckpoint, PassState, restore, snapshot
from mathneuro.util.padding import pad_token_id, right_padded

#: Statistics kinds: per-linear input norms, and per-neuron counts of positive MLP activations.
KINDS = ("linear_inputs", "activation_counts")
#: Old kind names that still work (LAPE's counts were called after the method that first used them).
KIND_ALIASES = {"lape": "activation_counts"}


def canonical_kind(kind: str) -> str:
    """``kind`` under its current name (``lape`` -> ``activation_counts``)."""
    return KIND_ALIASES.get(kind, kind)


class KindMap(dict):
    """Values by statistics kind that also answer to a kind's old name (``lape`` for ``activation_counts``)."""

    def __getitem__(self, kind: str) -> Any:
        return super().__getitem__(canonical_kind(kind))

    def __contains__(self, kind: object) -> bool:
        return super().__contains__(canonical_kind(kind) if isinstance(kind, str) else kind)

    def get(self, kind: str, default: Any = None) -> Any:
        return super().get(canonical_kind(kind), default)


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


class _LinearInputAccumulator:
    """Forward pre-hook state for every target linear; shares work between linears fed the same tensor."""

    def __init__(self, targets: dict[str, nn.Linear], kernel: str = "auto"):
        self.norm: dict[str, torch.Tensor] = {}
        self.sq: dict[str, torch.Tensor] = {}
        self.mask: torch.Tensor | None = None  # [B, T], 1 on real tokens
        self._last_input: torch.Tensor | None = None
        self._last_result: tuple[torch.Tensor, torch.Tensor] | None = None
        first = next(iter(targets.values()), None)
        self.square_sums = square_sum_kernel(kernel, sum(m.weight.numel() for m in targets.values()),
                                             first.weight.device if first is not None else "cpu")
        for name, mod in targets.items():
            dev = mod.weight.device
            self.norm[name] = torch.zeros(mod.in_features, dtype=torch.float32, device=dev)
            self.sq[name] = torch.zeros(mod.in_features, dtype=torch.float32, device=dev)

    def new_batch(self, mask: torch.Tensor) -> None:
        self.mask = mask
        self._last_input = None
        self._last_result = None

    def hook(self, name: str):
        def pre_hook(_module: nn.Module, args: tuple) -> None:
            x = args[0]
            if x is self._last_input and self._last_result is not None:
                norm_b, sq_b = self._last_result  # q/k/v (and gate/up) read one tensor: reuse its sums
            else:
                per_sample = self.square_sums(x, self.mask.to(x.device))  # [B, d] float32
                norm_b = per_sample.sqrt().sum(dim=0)
                sq_b = per_sample.sum(dim=0)
                self._last_input, self._last_result = x, (norm_b, sq_b)
            self.norm[name] += norm_b.to(self.norm[name].device)
            self.sq[name] += sq_b.to(self.sq[name].device)

        return pre_hook

    def tensors(self) -> dict[str, torch.Tensor]:
        out = {}
        for name in self.norm:
            out[f"{name}::norm"] = self.norm[name].cpu()
            out[f"{name}::sq"] = self.sq[name].cpu()
        return out


class _LapeAccumulator:
    """Forward hook state counting, per MLP neuron, the real tokens with activation > 0."""

    def __init__(self, activations: dict[str, nn.Module]):
        self.names = list(activations)
        self.positive: dict[str, torch.Tensor] = {}
        self.token_mask: torch.Tensor | None = None  # [B, T, 1] bool, None without padding

    def new_batch(self, token_mask: torch.Tensor | None) -> None:
        self.token_mask = token_mask

    def hook(self, name: str):
        def fwd_hook(_module: nn.Module, _args: tuple, output: torch.Tensor) -> None:
            pos = output > 0
            if self.token_mask is not None:
                pos &= self.token_mask.to(pos.device)
            counts = pos.sum(dim=(0, 1))
            if name in self.positive:  # (a resumed pass's saved counts may sit on another device)
                self.positive[name] += counts.to(self.positive[name].device)
            else:
                self.positive[name] = counts.to(torch.int64)

        return fwd_hook

    def tensors(self) -> dict[str, torch.Tensor]:
        return {f"{name}::positive": self.positive[name].cpu() for name in self.names}


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
    kinds = [canonical_kind(k) for k in kinds]
    unknown = [k for k in kinds if k not in KINDS]
    if unknown:
        raise ValueError(f"statistics kind: unknown {unknown}; allowed: {', '.join(KINDS)}")
    if batch_size < 1:
        raise ValueError(f"batch_size: must be >= 1, got {batch_size}")
    if not texts:
        raise ValueError("statistics: no samples given")
    lin = lape = None
    handles: list = []
    if "linear_inputs" in kinds:
        targets = targets if targets is not None else find_target_linears(model)
        lin = _LinearInputAccumulator(targets, kernel)
        handles += [mod.register_forward_pre_hook(lin.hook(name)) for name, mod in targets.items()]
    if "activation_counts" in kinds:
        activations = activations if activations is not None else find_mlp_activations(model)
        lape = _LapeAccumulator(activations)
        handles += [mod.register_forward_hook(lape.hook(name)) for name, mod in activations.items()]

    ids = tokenize(tokenizer, texts, max_length)
    lengths = [len(r) for r in ids]
    pad_id = pad_token_id(tokenizer)
    device = _input_device(model)
    decoder = base_model(model)
    num_tokens = start = 0
    batches = length_sorted_batches(lengths, batch_size)
    live = {**({"norm": lin.norm, "sq": lin.sq} if lin is not None else {}),
            **({"positive": lape.positive} if lape is not None else {})}
    if checkpoint is not None:
        expected = {f"{g}::{n}" for g, tensors in live.items() if g != "positive" for n in tensors}
        state = checkpoint.load(expected, len(batches))
        if state is not None:
            restore(live, state.tensors)
            num_tokens, start = state.num_tokens, state.batches_done
    last: PassState | None = None  # the accumulators after the last finished batch (to save if interrupted)
    with hooks(handles):
        bar = tqdm(total=len(ids), desc=desc, unit="sample", disable=not progress,
                   initial=sum(len(b) for b in batches[:start]))
        try:
            for done, batch in enumerate(batches[start:], start + 1):
                input_ids, attn = right_padded([ids[i] for i in batch], pad_id)
                padded = bool((attn == 0).any())
                if lin is not None:
                    lin.new_batch(attn.to(device))
                if lape is not None:
                    lape.new_batch(attn.bool().unsqueeze(-1).to(device) if padded else None)
                decoder(input_ids=input_ids.to(device), attention_mask=attn.to(device), use_cache=False)
                num_tokens += int(attn.sum())
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
    out: dict[str, Statistics] = KindMap()
    meta = {"max_length": max_length, "num_samples": len(ids)}
    if lin is not None:
        out["linear_inputs"] = Statistics("linear_inputs", lin.tensors(), len(ids), num_tokens, dict(meta))
    if lape is not None:
        out["activation_counts"] = Statistics("activation_counts", lape.tensors(), len(ids), num_tokens, dict(meta))
    return out
