"""Which way a metric improves, by its name, for tasks that do not say (our probes, a user's probe)."""

from __future__ import annotations

#: Parts of a metric name whose lower value is better.
LOWER_IS_BETTER = ("perplexity", "bits_per_byte", "loss", "_stderr")


def higher_is_better(metric: str) -> bool:
    """Perplexities, bits per byte, losses and standard errors: lower is better; everything else: higher.
    ``metric`` may be a flat name (``nonmath/ppl/token_perplexity``) or lm-eval's (``exact_match,strict-match``)."""
    name = metric.rsplit("/", 1)[-1].split(",", 1)[0]
    return not any(part in name for part in LOWER_IS_BETTER)
