"""How much the original's bfloat16 numerics move MathNeuro's selection (issue 16).

The original script multiplies |W| by each sample's activation norms inside the forward hook,
in bfloat16, and adds the [d_out, d_in] product to a bfloat16 running sum, sample after sample.
This tool sums the per-sample norms a_s in float32 and multiplies |W| once. Both see the same
activations here: one forward pass records every sample's a_s (float32 norms of the model's
activations); then per weight matrix

- float32 (ours):   S = |W| · Σ_s a_s                               (float32 throughout)
- bf16 (original):  S ← bf16(S + bf16(|W|_bf16 · bf16(a_s)))  for s = 1..N, S starting at 0

for the math and the filter samples, and M = top-K(math) \\ top-K(filter) per matrix from each.
Reported: sizes, Jaccard of the two M, the share of the float32 M that bf16 misses, and the same
for the math top-K sets.

    .venv/bin/python experiments/benchmarks/bf16_accumulation.py                    # SmolLM2-135M, 192 + 192, K = 5 %
    .venv/bin/python experiments/benchmarks/bf16_accumulation.py --model 1.5b       # Qwen2.5-Coder-1.5B-Instruct

``--model`` takes ``135m``, ``0.5b``, ``1.5b`` (GGUF files under /root/.cache/mathneuro-models, where
``../shared/models/fetch-models.sh /root/.cache/mathneuro-models qwen2.5-coder-1.5b`` puts the 1.5B) or
any path / Hub id ``load_model`` accepts. Writes a JSON of the numbers (``--out``).
Per-sample norms are kept in memory: N · d_in floats per linear (1.5B, 192 + 192 samples: ~0.8 GB).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from mathneuro.data.datasets import draw_samples, load_records, render
from mathneuro.methods import module_of, topk_count, topk_mask
from mathneuro.models import load_model
from mathneuro.models.targets import base_model, find_target_linears, weight_parameters
from mathneuro.report.overlap import overlap
from mathneuro.statistics.passes import length_sorted_batches, masked_square_sums, right_padded, tokenize

MODELS = {
    "135m": "/root/.cache/mathneuro-models/smollm2-135m/model.gguf",
    "0.5b": "/root/.cache/mathneuro-models/qwen2.5-coder-0.5b/model.gguf",
    "1.5b": "/root/.cache/mathneuro-models/qwen2.5-coder-1.5b/model.gguf",
}
DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data"  # ../shared/data from the repo root
MATH_TEMPLATE = "Question: {question}\nAnswer: {answer}"  # conf/task/gsm8k.yaml
# conf/filter/race.yaml
RACE_TEMPLATE = "{article}\n\nQuestion: {question}\n{options_lettered}\nAnswer: {answer}. {answer_text}"


@torch.no_grad()
def per_sample_norms(model, tokenizer, texts: list[str], *, max_length: int,
                     batch_size: int) -> dict[str, torch.Tensor]:
    """Per scored linear, the [N, d_in] float32 matrix of a_s[j] = ||X_s[:, j]||₂ over real tokens,
    rows in the order of ``texts`` (the same per-sample norms the tool sums)."""
    targets = find_target_linears(model)
    ids = tokenize(tokenizer, texts, max_length)
    out = {name: torch.zeros(len(ids), mod.in_features, dtype=torch.float32) for name, mod in targets.items()}
    state: dict = {}

    def hook(name):
        def pre_hook(_module, args):
            x = args[0]
            if state.get("x") is not x:
                state["x"], state["norms"] = x, masked_square_sums(x, state["mask"].to(x.device)).sqrt().cpu()
            out[name][state["rows"]] = state["norms"]

        return pre_hook

    handles = [mod.register_forward_pre_hook(hook(name)) for name, mod in targets.items()]
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    decoder = base_model(model)
    batches = length_sorted_batches([len(r) for r in ids], batch_size)
    try:
        for i, batch in enumerate(batches):
            input_ids, attn = right_padded([ids[j] for j in batch], pad)
            state.clear()
            state["mask"], state["rows"] = attn, torch.tensor(batch)
            decoder(input_ids=input_ids, attention_mask=attn, use_cache=False)
            print(f"  forward batch {i + 1}/{len(batches)}", flush=True)
    finally:
        for h in handles:
            h.remove()
    return out


def scores_f32(weight: torch.Tensor, norms: torch.Tensor) -> torch.Tensor:
    """This tool's score: |W| · Σ_s a_s, float32."""
    return weight.detach().abs().float() * norms.sum(dim=0).unsqueeze(0)


def scores_bf16(weight: torch.Tensor, norms: torch.Tensor) -> torch.Tensor:
    """The original's score: bf16 products |W|·a_s added one sample at a time to a bf16 sum."""
    absw = weight.detach().abs().to(torch.bfloat16)
    acc = torch.zeros_like(absw)
    for a in norms.to(torch.bfloat16):
        acc += absw * a.unsqueeze(0)  # bf16 product, rounded, then bf16 add, rounded
    return acc.float()


def selections(weights: dict, math: dict, other: dict, top_k: float, score) -> tuple[dict, dict]:
    """(M, math top-K) masks per matrix under one scoring function."""
    m_sets, top_sets = {}, {}
    for name, weight in weights.items():
        module = module_of(name)
        k = topk_count(weight.numel(), top_k)
        top = topk_mask(score(weight, math[module]), k)
        m_sets[name] = top & ~topk_mask(score(weight, other[module]), k)
        top_sets[name] = top
    return m_sets, top_sets


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="135m", help="135m, 0.5b, 1.5b or a path / Hub id")
    parser.add_argument("--dtype", default="bfloat16",
                        help="model dtype of the forward pass "
                             "(the original: bfloat16; float32 where the CPU lacks bf16 units)")
    parser.add_argument("--num-samples", type=int, default=192, help="samples of each of math and filter")
    parser.add_argument("--top-k", type=float, default=0.05)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-length", type=int, default=512)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--data-dir", type=Path, default=DATA, help="the shared data folder (default ../shared/data)")
    parser.add_argument("--math", default=None, help="math records (default <data-dir>/gsm8k/train.jsonl)")
    parser.add_argument("--filter", default=None, help="filter records (default <data-dir>/race/validation_high.jsonl)")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    parser.add_argument("--out", default=None, help="write the numbers to this JSON file")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    math_path = args.math or str(args.data_dir / "gsm8k" / "train.jsonl")
    filter_path = args.filter or str(args.data_dir / "race" / "validation_high.jsonl")
    t0 = time.perf_counter()
    model, tok = load_model(MODELS.get(args.model, args.model), dtype=args.dtype, device="cpu")
    model.eval()
    texts = {}
    for side, path, template, seed in (("math", math_path, MATH_TEMPLATE, 2 * args.seed),
                                       ("filter", filter_path, RACE_TEMPLATE, 2 * args.seed + 1)):
        records = load_records(path)
        ids = draw_samples(len(records), args.num_samples, seed, True)  # bootstrap draws as the runner's
        texts[side] = render([records[i] for i in ids], template)
    print(f"model loaded in {time.perf_counter() - t0:.0f} s", flush=True)
    t1 = time.perf_counter()
    norms = {side: per_sample_norms(model, tok, t, max_length=args.max_length, batch_size=args.batch_size)
             for side, t in texts.items()}
    t_forward = time.perf_counter() - t1
    per_module = {side: {module_of(n): v for n, v in d.items()} for side, d in norms.items()}
    weights = weight_parameters(find_target_linears(model))
    t2 = time.perf_counter()
    m32, top32 = selections(weights, per_module["math"], per_module["filter"], args.top_k, scores_f32)
    m16, top16 = selections(weights, per_module["math"], per_module["filter"], args.top_k, scores_bf16)
    t_scores = time.perf_counter() - t2
    o_m, o_top = overlap(m32, m16), overlap(top32, top16)
    result = {
        "model": args.model, "dtype": args.dtype, "num_samples": args.num_samples, "top_k": args.top_k,
        "seed": args.seed, "max_length": args.max_length,
        "M": {"size_f32": o_m["size_a"], "size_bf16": o_m["size_b"], "jaccard": o_m["jaccard"],
              "missed_share": 1 - o_m["a_in_b"], "spurious_share": 1 - o_m["b_in_a"]},
        "math_topk": {"size": o_top["size_a"], "jaccard": o_top["jaccard"], "missed_share": 1 - o_top["a_in_b"]},
        "seconds": {"forward": round(t_forward, 1), "scores": round(t_scores, 1),
                    "total": round(time.perf_counter() - t0, 1)},
    }
    print(json.dumps(result, indent=2))
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
