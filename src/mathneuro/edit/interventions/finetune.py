"""``finetune``: train only the selected weights (a neuron-level selection: its neurons' rows and column)
for ``intervention.steps`` steps of next-token loss, every other weight frozen and bit-identical.

The data is by default the point's draw of the task set (the identification samples, e.g. GSM8K's
train split), never the evaluated examples; ``intervention.data`` names another dataset (a task-like
node: ``{name, path, split, subset, template}``; a test split is refused). Each step draws
``batch_size`` texts with a generator seeded by ``intervention.seed`` (default: the point's seed), so
MathNeuro's point and its random reference of the same seed train on the same batches in the same
order. The model stays in eval mode (no dropout): the only difference between the two is which
weights move. The loss of every step goes to ``results.json`` (``intervention.losses``) and to W&B
(``intervention/loss``); the undo restores the weights bit for bit.
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from dataclasses import dataclass
from typing import Any, Optional

import torch
from tqdm.auto import tqdm

from mathneuro.data.datasets import DatasetConfig, load_records, render
from mathneuro.edit.interventions.registry import register_intervention
from mathneuro.edit.interventions.sparse import OPTIMIZERS, SparseTrainable, make_optimizer, state_bytes
from mathneuro.edit.interventions.spec import (
    InterventionConfig,
    InterventionContext,
    check_choice,
    check_positive,
)
from mathneuro.edit.interventions.units import by_parameter, weight_masks
from mathneuro.edit.undoable import Intervention
from mathneuro.statistics.passes import tokenize
from mathneuro.util.padding import pad_token_id, right_padded

EVALUATION_SPLITS = ("test", "validation", "valid", "dev", "eval")


@dataclass
class FinetuneConfig(InterventionConfig):
    name: str = "finetune"
    steps: int = 20
    lr: float = 1e-4
    batch_size: int = 4
    seq_length: int = 256
    optimizer: str = "adamw"
    weight_decay: float = 0.0
    seed: Optional[int] = None  # None: the point's seed
    data: Optional[DatasetConfig] = None  # None: the point's task samples

    def validate(self, key: str = "intervention") -> None:
        for name in ("steps", "batch_size", "seq_length"):
            check_positive(getattr(self, name), f"{key}.{name}", int)
        check_positive(self.lr, f"{key}.lr")
        if not (isinstance(self.weight_decay, (int, float)) and self.weight_decay >= 0):
            raise ValueError(f"{key}.weight_decay: must be >= 0, got {self.weight_decay!r}")
        check_choice(self.optimizer, f"{key}.optimizer", OPTIMIZERS)
        if self.data is not None:
            self.data.validate(f"{key}.data")
            stem = str(self.data.split or str(self.data.path).rsplit("/", 1)[-1].split(".")[0]).lower()
            if stem in EVALUATION_SPLITS:
                raise ValueError(f"{key}.data: {self.data.path} ({stem}) looks like evaluation data; "
                                 "finetune trains on training data only (a train split)")


def training_texts(ctx: InterventionContext, cfg: FinetuneConfig) -> tuple[list[str], dict[str, Any]]:
    """The texts to train on and what identifies them (recorded in ``results.json``)."""
    if cfg.data is None:
        texts = ctx.require("task_samples")
        return list(texts), {"source": "task_samples", "name": ctx.task_name, "ids_hash": ctx.task_ids_hash,
                             "num_texts": len(texts)}
    data = cfg.data
    records = load_records(data.path, split=data.split, name=data.subset, key="intervention.data.path")
    if not records:
        raise ValueError(f"intervention.data.path: dataset {data.path!r} is empty")
    texts = render(records, data.template, key="intervention.data.template")
    digest = hashlib.sha256(json.dumps(texts).encode()).hexdigest()[:16]
    return texts, {"source": "data", "name": data.name, "path": data.path, "split": data.split,
                   "num_texts": len(texts), "texts_hash": digest}


def batches(rows: list[list[int]], cfg: FinetuneConfig, seed: int, pad_id: int):
    """``steps`` batches of ``batch_size`` rows drawn with replacement by a seeded generator:
    ``(input_ids, attention_mask, labels)`` with padding labelled -100."""
    generator = torch.Generator().manual_seed(seed)
    for _ in range(cfg.steps):
        pick = torch.randint(len(rows), (cfg.batch_size,), generator=generator).tolist()
        input_ids, attn = right_padded([rows[i] for i in pick], pad_id)
        yield input_ids, attn, input_ids.masked_fill(attn == 0, -100)


@register_intervention("finetune", config=FinetuneConfig, units=("weights", "neurons"), needs=("task_samples",),
                       point_fields=("steps", "lr", "batch_size", "seq_length", "optimizer", "weight_decay", "seed",
                                     "data"),
                       description="train only the selection for intervention.steps steps")
def finetune(ctx: InterventionContext, cfg: FinetuneConfig) -> Intervention:
    """Train the selected weights on next-token loss; everything else frozen."""
    model = ctx.model
    seed = ctx.seed if cfg.seed is None else int(cfg.seed)
    texts, data_info = training_texts(ctx, cfg)
    rows = tokenize(ctx.tokenizer, texts, cfg.seq_length)
    entries = by_parameter(model, weight_masks(model, ctx.selection))
    handle = Intervention()
    for _name, param, mask in entries:  # the originals of every entry training may write, for the undo
        handle.save(param, mask.reshape(-1).nonzero().squeeze(1).to(param.device))
    trainable = SparseTrainable(entries, model)
    device = next(model.parameters()).device
    losses: list[float] = []
    t0 = time.perf_counter()
    try:
        optimizer = make_optimizer(cfg.optimizer, [trainable.vector], cfg.lr, cfg.weight_decay)
        start = trainable.vector.detach().clone()
        with torch.enable_grad():
            bar = tqdm(batches(rows, cfg, seed, pad_token_id(ctx.tokenizer)), total=cfg.steps, desc="finetune",
                       disable=not ctx.progress, leave=False)
            for step, (input_ids, attn, labels) in enumerate(bar):
                trainable.zero_grad()
                loss = model(input_ids=input_ids.to(device), attention_mask=attn.to(device),
                             labels=labels.to(device), use_cache=False).loss
                loss.backward()
                optimizer.step()
                trainable.write_back()
                losses.append(float(loss.detach()))
                ctx.log({"intervention/loss": losses[-1]}, step)
                if not math.isfinite(losses[-1]):
                    raise ValueError(f"intervention.lr: the loss became {losses[-1]} at step {step}; "
                                     "try a smaller learning rate")
        moved = (trainable.vector.detach() - start)
        handle.record = {
            "seed": seed, "steps": cfg.steps, "losses": losses, "data": data_info,
            "num_weights": len(trainable), "matrices": len(entries), "per_matrix": trainable.counts(),
            "update_rms": float(moved.pow(2).mean().sqrt()) if moved.numel() else 0.0,
            "optimizer_state_bytes": state_bytes(optimizer),
            "seconds": round(time.perf_counter() - t0, 3),
        }
    except BaseException:
        trainable.release()
        handle.undo()
        raise
    trainable.release()
    return handle
