"""The built-in probes as registry entries: each loads its data once per evaluator (``ctx.cache``)
and calls the probe functions of :mod:`mathneuro.evaluation.probes`. ``arith``, ``mc`` and
``gsm8k_gen`` also hand their per-example records to ``ctx.records`` (written with ``eval.log_samples``)."""

from __future__ import annotations

from mathneuro.evaluation.gsm8k_alias import Gsm8kGen
from mathneuro.evaluation.probe_registry import ProbeContext, register_probe
from mathneuro.evaluation.probes import (
    apply_limit,
    gsm8k_file,
    mc_records,
    mean_metrics,
    ppl_probe,
    score_arith,
    score_mc,
    text_documents,
)


@register_probe("arith", kind="math")
def arith(ctx: ProbeContext) -> dict[str, float]:
    """Exact match on generated ``a <op> b =`` problems (``eval.arith``)."""
    ctx.records = score_arith(ctx.model, ctx.tokenizer, ctx.cfg.arith, batch_size=ctx.batch_size, progress=ctx.progress)
    ctx.num_examples = len(ctx.records)
    ctx.info = {"n_shot": ctx.cfg.arith.num_fewshot}
    return mean_metrics(ctx.records, ("exact_match",))


@register_probe("gsm8k_gen", kind="math")
def gsm8k_gen(ctx: ProbeContext) -> dict[str, float]:
    """lm-eval's gsm8k_cot on the probe's problems (:mod:`mathneuro.evaluation.gsm8k_alias`; ``eval.gsm8k_gen``)."""
    if "data" not in ctx.cache:
        ctx.cache["data"] = Gsm8kGen(ctx.model, ctx.tokenizer, ctx.cfg, gsm8k_file(ctx.cfg.gsm8k_gen, ctx.data_dir))
    run = ctx.cache["data"].run()
    ctx.num_examples = run.num_examples
    if len(run.samples) == 1:  # lm-eval's records of gsm8k_cot, filed under this probe's name
        ctx.records = next(iter(run.samples.values()))
    ctx.info = {**next(iter(run.info.values()), {}), "runs": "gsm8k_cot"}
    return run.metrics


@register_probe("mc", kind="nonmath")
def mc(ctx: ProbeContext) -> dict[str, float]:
    """Multiple-choice accuracy by log-likelihood (``eval.mc``)."""
    if "data" not in ctx.cache:
        ctx.cache["data"] = apply_limit(mc_records(ctx.cfg.mc.file), ctx.limit)
    ctx.num_examples = len(ctx.cache["data"])
    ctx.records = score_mc(ctx.model, ctx.tokenizer, ctx.cache["data"], batch_size=ctx.batch_size,
                           progress=ctx.progress)
    ctx.info = {"n_shot": 0}
    return mean_metrics(ctx.records, ("acc", "acc_norm"))


@register_probe("ppl", kind="nonmath")
def ppl(ctx: ProbeContext) -> dict[str, float]:
    """Perplexity of a text set (``eval.ppl``)."""
    if "data" not in ctx.cache:
        ctx.cache["data"] = apply_limit(text_documents(ctx.cfg.ppl.file), ctx.limit)
    ctx.num_examples = len(ctx.cache["data"])
    ctx.info = {"n_shot": 0}
    return ppl_probe(ctx.model, ctx.tokenizer, ctx.cache["data"], max_length=ctx.cfg.ppl.max_length,
                     batch_size=ctx.batch_size, progress=ctx.progress)
