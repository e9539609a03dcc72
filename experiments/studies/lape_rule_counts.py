"""How many math neurons LAPE selects under each top-K rule (issue 13), on a real model.

    PYTHONPATH=src .venv/bin/python experiments/studies/lape_rule_counts.py \
        --model /root/.cache/mathneuro-models/smollm2-135m/model.gguf --num-samples 24 --top-k 0.05 0.15

Identification data: the embedded demo sets (``task=embedded_math``, ``filter=embedded_nonmath``,
the defaults of ``conf/config.yaml``), drawn as the runner draws them (bootstrap, task seed 2·seed,
filter seed 2·seed + 1). Prints the token counts, the candidates, and per top-K and rule the kept
and math neurons, the saturation point and the Jaccard overlap of the two rules' math sets.
"""

from __future__ import annotations

import argparse
import json
import time

from mathneuro.data.datasets import draw_samples, load_records, render
from mathneuro.methods import lape_min_top_k, lape_selection
from mathneuro.models import load_model
from mathneuro.statistics.passes import collect_statistics

MATH = ("embedded://math_demo", "Question: {question}\nAnswer: {answer}")
NONMATH = ("embedded://nonmath_demo", "{instruction}\n{response}")


def texts_of(path: str, template: str, num_samples: int, seed: int) -> list[str]:
    records = load_records(path)
    ids = draw_samples(len(records), num_samples, seed, bootstrap=True)
    return render([records[i] for i in ids], template)


def neuron_set(selection) -> set[tuple[str, int]]:
    return {(m, int(i)) for m, idx in selection.neurons.items() for i in idx.tolist()}


def rule_counts(model, tok, num_samples: int, top_ks: list[float], seed: int = 0, max_length: int = 512,
                batch_size: int = 8) -> dict:
    """Token counts, candidates and, per top-K, each rule's kept / math neurons and their Jaccard."""
    stats = [collect_statistics(model, tok, texts_of(path, tpl, num_samples, s), kinds=("lape",),
                                max_length=max_length, batch_size=batch_size, progress=False)["lape"]
             for (path, tpl), s in ((MATH, 2 * seed), (NONMATH, 2 * seed + 1))]
    out: dict = {"num_samples": num_samples, "tokens": {"math": stats[0].num_tokens, "filter": stats[1].num_tokens},
                 "points": []}
    for top_k in top_ks:
        sels = {share: lape_selection(stats[0], stats[1:], top_k, share=share) for share in ("all", "candidates")}
        a, c = neuron_set(sels["all"]), neuron_set(sels["candidates"])
        meta = sels["all"].meta
        out.update(num_neurons=meta["num_neurons"], num_candidates=meta["num_candidates"],
                   saturation_top_k=meta["saturation_top_k"], min_top_k=lape_min_top_k(meta["num_neurons"]))
        out["points"].append({
            "top_k": top_k,
            **{f"{share}/{k}": sels[share].meta[k] for share in sels for k in ("num_kept", "saturated")},
            "all/math": len(a), "candidates/math": len(c),
            "jaccard": len(a & c) / len(a | c) if a | c else 1.0, "candidates_in_all": c <= a,
        })
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="/root/.cache/mathneuro-models/smollm2-135m/model.gguf")
    parser.add_argument("--num-samples", type=int, default=24)
    parser.add_argument("--top-k", type=float, nargs="+", default=[0.05, 0.15])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--cache-dir", default=None)
    args = parser.parse_args()
    start = time.perf_counter()
    model, tok = load_model(args.model, device="cpu", cache_dir=args.cache_dir)
    result = rule_counts(model, tok, args.num_samples, args.top_k, seed=args.seed)
    result["seconds"] = round(time.perf_counter() - start, 1)
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
