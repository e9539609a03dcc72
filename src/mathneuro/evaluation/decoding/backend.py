"""``mathneuro-hf``: lm-eval's ``hf`` backend with mathneuro's decoding engine, for any lm-eval user.

After ``import mathneuro`` (:mod:`mathneuro.util.lm_eval_plugin` registers the name)::

    import mathneuro, lm_eval
    lm_eval.simple_evaluate(model="mathneuro-hf", model_args="pretrained=HuggingFaceTB/SmolLM2-135M,dtype=float32",
                            tasks=["gsm8k_cot"], batch_size=8)

It takes every ``model_args`` key of lm-eval's ``hf`` (``pretrained``, ``dtype``, ``device``,
``max_length``, ``softmax_dtype``, ...; ``batch_size`` and ``device`` as lm-eval passes them) and
these, each with a default that suits an ordinary evaluation (docs/evaluation.md):

- ``prefix_cache`` (``true``): the engine. Few-shot generation computes the prompt prefix its requests
  share once; multiple-choice scoring runs a context shared by several choices once. ``false``: every
  request goes through ``hf``'s own code, exactly as ``model=hf``.
- ``min_prefix_tokens`` (16): the shortest shared prefix worth a cache.
- ``continuous_batching`` (``auto``): greedy requests decode ``batch_size`` at a time and a finished
  row's slot goes to the next request. ``auto``: where the model computes in float32 (there the
  tokens equal lm-eval's batches'); ``on``; ``off``.
- ``prompt_lookup`` (``auto``): greedy rows draft tokens by lookup in their prompt and their own
  tokens, verified in one pass. Same modes as ``continuous_batching``.
- ``draft_tokens`` (``none``: adaptive): the length of lookup drafts.
- ``drafts`` (``none``): a draft-store folder. Greedy requests whose answer it holds (written there
  by an earlier run with ``record_drafts=true``, typically of the unedited model) decode from that
  answer as a draft, verified in one pass: fast when the two models mostly agree, and the tokens
  are this model's own (exact in float32).
- ``record_drafts`` (``false``): write this run's greedy answers into ``drafts``.
- ``draft`` (``baseline``): take drafts from the draft store; ``none``: ignore it.
- ``journal`` (``none``): a batch-journal folder. Each generated batch is kept there as it completes,
  and a run cut short resumes at the batch it was in with an uninterrupted run's tokens. A journal
  belongs to one model, one task set and settings: give each run its own folder.

Every value may come as lm-eval parses ``model_args`` (``true``/``false``, ``none``, numbers); a wrong
value fails before the model loads, naming the key. In float32 the answers are ``hf``'s; in bf16 a
greedy path can part where two tokens nearly tie (docs/evaluation.md).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lm_eval.models.huggingface import HFLM

from mathneuro.evaluation.decoding.batch_journal import BatchJournal, attach_batch_journal
from mathneuro.evaluation.decoding.drafts import DRAFT_MODES, DraftStore, attach_draft_store
from mathneuro.evaluation.decoding.greedy_search import PROMPT_LOOKUP_MODES
from mathneuro.evaluation.decoding.prefix_cache import PrefixCacheHFLM
from mathneuro.evaluation.generation import generation_eos_ids
from mathneuro.util.lm_eval_plugin import BACKEND


def _flag(key: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false", "on", "off", "yes", "no", "1", "0"):
        return value.lower() in ("true", "on", "yes", "1")
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    raise ValueError(f"{BACKEND}: {key}: {value!r} is not true or false")


def _mode(key: str, value: Any, allowed: tuple[str, ...]) -> str:
    """An on/off/auto option as lm-eval hands it over (``true``/``false`` parsed to booleans, ``none`` to None)."""
    if value is True:
        value = "on"
    elif value is False:
        value = "off"
    if value not in allowed:
        raise ValueError(f"{BACKEND}: {key}: unknown value {value!r}; allowed: {', '.join(allowed)}")
    return str(value)


def engine_options(prefix_cache: Any = True, min_prefix_tokens: Any = 16, draft: Any = "baseline",
                   draft_tokens: Any = None, prompt_lookup: Any = "auto", continuous_batching: Any = "auto",
                   drafts: Any = None, record_drafts: Any = False, journal: Any = None) -> dict[str, Any]:
    """The engine's options checked and normalised (the keyword arguments of :class:`MathneuroHFLM`)."""
    out: dict[str, Any] = {"prefix_cache": _flag("prefix_cache", prefix_cache),
                           "record_drafts": _flag("record_drafts", record_drafts),
                           "prompt_lookup": _mode("prompt_lookup", prompt_lookup, PROMPT_LOOKUP_MODES),
                           "continuous_batching": _mode("continuous_batching", continuous_batching,
                                                        PROMPT_LOOKUP_MODES),
                           "draft": _mode("draft", "none" if draft is None or draft is False else draft, DRAFT_MODES)}
    for key, value, least in (("min_prefix_tokens", min_prefix_tokens, 1), ("draft_tokens", draft_tokens, 1)):
        if value is None and key == "draft_tokens":
            out[key] = None
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise ValueError(f"{BACKEND}: {key}: {value!r} is not a whole number >= {least}")
        out[key] = value
    for key, value in (("drafts", drafts), ("journal", journal)):
        if value is not None and not isinstance(value, (str, Path)):
            raise ValueError(f"{BACKEND}: {key}: {value!r} is not a folder")
        out[key] = Path(value).expanduser() if value is not None else None
    if out["record_drafts"] and out["drafts"] is None:
        raise ValueError(f"{BACKEND}: record_drafts: needs drafts=<folder> to record into")
    return out


class MathneuroHFLM(PrefixCacheHFLM):
    """lm-eval's ``HFLM`` with the decoding engine (shared-prefix cache, continuous batching, drafted
    decoding, the batch journal), registered with lm-eval as ``mathneuro-hf``; options: the module's doc.

    The one way mathneuro builds its lm-eval model too (:class:`~mathneuro.evaluation.harness.Harness`
    passes the in-memory model as ``pretrained``, as lm-eval allows). ``prefix_stats`` describes the last call.
    """

    def __init__(self, pretrained: Any = None, *, prefix_cache: Any = True, min_prefix_tokens: Any = 16,
                 draft: Any = "baseline", draft_tokens: Any = None, prompt_lookup: Any = "auto",
                 continuous_batching: Any = "auto", drafts: Any = None, record_drafts: Any = False,
                 journal: Any = None, **kwargs: Any) -> None:
        if pretrained is None:
            raise ValueError(f"{BACKEND}: pretrained: a model name, folder or model object is needed")
        opts = engine_options(prefix_cache, min_prefix_tokens, draft, draft_tokens, prompt_lookup,
                              continuous_batching, drafts, record_drafts, journal)
        super().__init__(pretrained=pretrained, min_prefix_tokens=opts["min_prefix_tokens"], draft=opts["draft"],
                         draft_tokens=opts["draft_tokens"], prompt_lookup=opts["prompt_lookup"],
                         continuous_batching=opts["continuous_batching"], **kwargs)
        self.prefix_cache = opts["prefix_cache"]
        if opts["drafts"] is not None:
            store = DraftStore(opts["drafts"], {"store": BACKEND, "generation_eos_ids": sorted(
                generation_eos_ids(self.model))}, vocab_size=getattr(self.model.config, "vocab_size", None))
            store.recording_on = opts["record_drafts"]
            attach_draft_store(self.model, store)
        if opts["journal"] is not None:
            attach_batch_journal(self.model, BatchJournal(opts["journal"]))

    # prefix_cache=false: hf's own code for every request (the engine's overrides step aside)
    def generate_until(self, requests, disable_tqdm: bool = False) -> list[str]:
        if not self.prefix_cache:
            return HFLM.generate_until(self, requests, disable_tqdm=disable_tqdm)
        return super().generate_until(requests, disable_tqdm=disable_tqdm)

    def _model_generate(self, context, max_length: int, stop: list[str], **generation_kwargs: Any):
        if not self.prefix_cache:
            return HFLM._model_generate(self, context, max_length, stop, **generation_kwargs)
        return super()._model_generate(context, max_length, stop, **generation_kwargs)

    def _loglikelihood_tokens(self, requests, disable_tqdm: bool = False, override_bs: int | None = None):
        if not self.prefix_cache:
            return HFLM._loglikelihood_tokens(self, requests, disable_tqdm=disable_tqdm, override_bs=override_bs)
        return super()._loglikelihood_tokens(requests, disable_tqdm=disable_tqdm, override_bs=override_bs)


def _register_old_lm_eval() -> None:
    """lm-eval 0.4.8 and 0.4.9 keep classes in a plain dict (no lazy entries): register the class itself."""
    from lm_eval.api import registry

    table = getattr(registry, "MODEL_REGISTRY", None)
    if not hasattr(registry, "model_registry") and isinstance(table, dict):
        table.setdefault(BACKEND, MathneuroHFLM)


_register_old_lm_eval()

__all__ = ["BACKEND", "MathneuroHFLM", "engine_options"]
