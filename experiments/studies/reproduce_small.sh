#!/usr/bin/env bash
# A reduced pruning sweep on Qwen2.5-Coder-0.5B-Instruct that fits a 2-core CPU in about 40 minutes:
# top_k x {mathneuro (RACE filter), wanda, random}, one bootstrap draw of N=100 per dataset.
# Identification: GSM8K train (math), RACE-high dev (filter). Evaluation never sees those records:
# 2-digit +/- arithmetic (60), GSM8K test chain of thought (20, 8-shot), our 40-question
# multiple choice and perplexity probes. Run from the repository root with ../shared beside it.
set -euo pipefail
cd "$(dirname "$0")/../.."
models=${MODELS:-$HOME/.cache/mathneuro/gguf}
bash ../shared/models/fetch-models.sh "$models" qwen2.5-coder-0.5b
data=$(cd ../shared/data && pwd)
sweep=${SWEEP:-outputs/sweeps/reproduce_small}
.venv/bin/python -m mathneuro -m \
  model=qwen2_5_coder_0_5b model.name_or_path="$models/qwen2.5-coder-0.5b/model.gguf" \
  task=gsm8k task.path="$data/gsm8k/train.jsonl" \
  filter=race filter.path="$data/race/validation_high.jsonl" \
  num_samples=100 max_length=512 batch_size=8 \
  eval=probes eval.data_dir="$data" eval.limits.gsm8k_gen=20 \
  eval.arith.digits=2 eval.arith.num_problems=60 \
  top_k=${TOP_K:-0.01,0.05,0.15} method=${METHODS:-mathneuro,wanda,random} \
  hydra.sweep.dir="$sweep" "$@"
.venv/bin/mathneuro-report "$sweep"
