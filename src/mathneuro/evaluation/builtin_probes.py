"""The built-in probes as registry entries: each loads its data once per evaluator (``ctx.cache``)
and calls the probe functions of :mod:`mathneuro.evaluation.probes`."""

from __future__ import annotations

from mathneuro.evaluation.probe_registry import ProbeContext, register_probe
from mathneuro.evaluation.probes import (
    apply_limit,
    arith_probe,
    gsm8k_file,
    mc_probe,
    mc_records,
    ppl_probe,
    text_documents,
)


@register_probe("arith", kind="math")
def arith(ctx: ProbeContext) -> dict[str, float]:
    """Exact match on generated ``a <op> b =`` problems (``eval.arith``)."""
    ctx.num_examples = ctx.cfg.arith.num_problems
    return arith_probe(ctx.model, ctx.tokenizer, ctx.cfg.arith, batch_size=ctx.batch_size, progress=ctx.progress)


@register_probe("gsm8k_gen", kind="math")
def gsm8k_gen(ctx: ProbeContext) -> dict[str, float]:
    """lm-eval's gsm8k_cot on the probe's problems (:mod:`mathneuro.evaluation.gsm8k_alias`; ``eval.gsm8k_gen``)."""
    if "data" not in ctx.cache:
        from mathneuro.evaluation.gsm8k_alias import Gsm8kGen

        ctx.cache["data"] = Gsm8kGen(ctx.model, ctx.tokenizer, ctx.cfg, gsm8k_file(ctx.cfg.gsm8k_gen, ctx.data_dir))
    run = ctx.cache["data"].run()
    ctx.num_examples = run.num_examples
    return run.metrics


@register_probe("mc", kind="nonmath")
def mc(ctx: ProbeContext) -> dict[str, float]:
    """Multiple-choice accuracy by log-likelihood (``eval.mc``)."""
    if "data" not in ctx.cache:
        ctx.cache["data"] = apply_limit(mc_records(ctx.cfg.mc.file), ctx.limit)
    ctx.num_examples = len(ctx.cache["data"])
    return mc_probe(ctx.model, ctx.tokenizer, ctx.cache["data"], batch_size=ctx.batch_size, progress=ctx.progress)


@register_probe("ppl", kind="nonmath")
def ppl(ctx: ProbeContext) -> dict[str, float]:
    """Perplexity of a text set (``eval.ppl``)."""
    if "data" not in ctx.cache:
        ctx.cache["data"] = apply_limit(text_documents(ctx.cfg.ppl.file), ctx.limit)
    ctx.num_examples = len(ctx.cache["data"])
    return ppl_probe(ctx.model, ctx.tokenizer, ctx.cache["data"], max_length=ctx.cfg.ppl.max_length,
                     batch_size=ctx.batch_size, progress=ctx.progress)
