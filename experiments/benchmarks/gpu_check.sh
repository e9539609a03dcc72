#!/usr/bin/env bash
# The checks that need a GPU, as one script: CUDA tests, the identification benchmark and one whole
# 1.5B-sized sweep point (statistics, selection, pruning, lm-eval GSM8K CoT + MMLU, arithmetic) on CUDA.
#
#   bash experiments/benchmarks/gpu_check.sh prepare   # here: fills .gpu/ (git-ignored) with what the GPU machine lacks
#   bash experiments/benchmarks/gpu_check.sh run       # there: writes its numbers and logs under $OUT (default outputs/gpu_check)
#
# The model is Qwen2.5-Coder-1.5B's architecture with random weights, built from its config.json on the GPU:
# a real model's speed and memory without moving 3 GB (its real tokenizer travels). Scores are therefore at
# chance and only the timings, the memory and the CUDA-vs-CPU agreement mean anything.
# prepare needs: the converted 1.5B in the mathneuro cache (any run of a claims runner on the 1.5B GGUF leaves it
# there), the shared data (DATA, default ../shared/data) and, for a machine without the project's dependencies, wheels in
# .whl/ (see /work/.library/device/README.md); run installs .whl/*.whl into /tmp/site when present.
# $OUT gets eleven files: install.log test_cuda.log bench_identification.json point.log point_results.json
# pass_cost.json draft.json draft.log draft_math.json draft_math.log suite.log
# Environment: TESTS (1) BENCH (1) POINT (1) DRAFT (1; DRAFT_QUESTIONS 64) SUITE (1: the whole test suite under
# pytest-xdist, last)
#   N (100 identification samples per set) GSM8K (100) MMLU (5 per subject) EVAL_BATCH (32) SUITE_TIMEOUT (240 s)
set -uo pipefail
cd "$(dirname "$0")/../.."
mode=${1:?usage: gpu_check.sh prepare|run}
gpu=.gpu

prepare() {
  set -e
  local data cfg
  data=$(cd "${DATA:-../shared/data}" && pwd)
  cfg=$(grep -l '"hidden_size": 1536' "${MATHNEURO_CACHE:-$HOME/.cache/mathneuro}"/models/*/config.json | head -1)
  [ -n "$cfg" ] || { echo "no converted Qwen2.5-1.5B in the mathneuro cache" >&2; exit 2; }
  rm -rf "$gpu" && mkdir -p "$gpu/model" "$gpu/data"/{gsm8k,race,math,mmlu/by_subject}
  grep -qx "/$gpu/" .git/info/exclude 2>/dev/null || echo "/$gpu/" >> .git/info/exclude
  local src; src=$(dirname "$cfg")
  cp "$src"/{config.json,generation_config.json,tokenizer_config.json,chat_template.jinja} "$gpu/model/"
  gzip -c "$src/tokenizer.json" > "$gpu/model/tokenizer.json.gz"
  head -n 400 "$data/gsm8k/train.jsonl" > "$gpu/data/gsm8k/train.jsonl"
  head -n "${GSM8K:-100}" "$data/gsm8k/test.jsonl" > "$gpu/data/gsm8k/test.jsonl"
  head -n "${DRAFT_QUESTIONS:-64}" "$data/math/test.jsonl" > "$gpu/data/math/test.jsonl"  # the zero-shot draft bench
  head -n 400 "$data/race/validation_high.jsonl" > "$gpu/data/race/validation_high.jsonl"
  head -n 20 "$data/race/test_high_by_article.jsonl" > "$gpu/data/race/test_high_by_article.jsonl"
  cp "$data/mmlu/validation_prerelease.jsonl" "$gpu/data/mmlu/"
  for f in "$data"/mmlu/by_subject/*_test.jsonl; do head -n "${MMLU:-5}" "$f" > "$gpu/data/mmlu/by_subject/$(basename "$f")"; done
  cp "$data"/mmlu/by_subject/*_dev.jsonl "$gpu/data/mmlu/by_subject/"
  du -sh "$gpu" .whl 2>/dev/null
}

run() {
  local out=${OUT:-outputs/gpu_check} py=${PYTHON:-python3}
  mkdir -p "$out"
  if ls .whl/*.whl >/dev/null 2>&1; then
    "$py" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
      > "$out/install.log" 2>&1 || { tail "$out/install.log"; exit 2; }
    export PYTHONPATH=/tmp/site
  fi
  export PYTHONPATH="$PWD/src:$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 WANDB_MODE=offline HF_HUB_OFFLINE=1 \
    HF_DATASETS_OFFLINE=1 TRANSFORMERS_OFFLINE=1 MATHNEURO_CACHE=/tmp/mathneuro-cache
  nvidia-smi -L; "$py" -c "import torch, transformers; print('torch', torch.__version__, 'cuda', torch.version.cuda,
'transformers', transformers.__version__, torch.cuda.get_device_name(0))"
  local t0=$SECONDS
  if [ "${TESTS:-1}" = 1 ]; then
    "$py" -m pytest -q -p no:cacheprovider tests/test_cuda.py -m "not slow" -rs 2>&1 | tee "$out/test_cuda.log" | tail -n 15
    echo "test_cuda: $((SECONDS - t0)) s"
  fi
  local model=/tmp/qwen2.5-1.5b-random
  "$py" - "$gpu/model" "$model" <<'EOF'
import gzip, shutil, sys, time
from pathlib import Path
import torch
from transformers import AutoConfig, AutoModelForCausalLM
src, dst = Path(sys.argv[1]), Path(sys.argv[2])
t = time.perf_counter()
cfg = AutoConfig.from_pretrained(src)
torch.manual_seed(0)
with torch.device("cuda"):
    model = AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)
model.save_pretrained(dst)
for f in src.iterdir():
    if f.name.endswith(".gz"):
        with gzip.open(f) as a, open(dst / f.name[:-3], "wb") as b:
            shutil.copyfileobj(a, b)
    elif f.name != "config.json":
        shutil.copy(f, dst / f.name)
print(f"random {sum(p.numel() for p in model.parameters()) / 1e9:.2f}B model written in {time.perf_counter() - t:.0f} s")
EOF
  if [ "${BENCH:-1}" = 1 ]; then
    t0=$SECONDS
    "$py" experiments/benchmarks/bench_identification.py --model "$model" --dtype bfloat16 --device cuda \
      --data "$gpu/data/gsm8k/train.jsonl" --n "${N:-100}" --batch-size 16 --max-length 512 --original-n 16 \
      --json "$out/bench_identification.json" 2>&1 | tail -n 20
    echo "bench: $((SECONDS - t0)) s"
  fi
  if [ "${POINT:-1}" = 1 ]; then
    t0=$SECONDS
    "$py" -m mathneuro model.name_or_path="$model" model.name=qwen2.5-1.5b-random model.dtype=bfloat16 \
      model.device=auto task=gsm8k task.path="$gpu/data/gsm8k/train.jsonl" filter=mmlu \
      filter.path="$gpu/data/mmlu/validation_prerelease.jsonl" num_samples="${N:-100}" max_length=512 batch_size=16 \
      method=mathneuro top_k=0.15 eval=paper 'eval.tasks=[arith,gsm8k_cot,mmlu]' eval.limits.gsm8k_cot="${GSM8K:-100}" \
      eval.limits.mmlu="${MMLU:-5}" eval.arith.digits=2 'eval.arith.operations=["+","-"]' eval.arith.num_problems=100 \
      eval.data_dir="$gpu/data" eval.batch_size="${EVAL_BATCH:-32}" eval.log_samples=true logger=none progress=false \
      save_selection=false hydra.run.dir=/tmp/gpu_check_point > "$out/point.log" 2>&1
    echo "point: rc $? in $((SECONDS - t0)) s"; tail -n 5 "$out/point.log"
    "$py" -c "import json,sys; r=json.load(open(sys.argv[1])); print(json.dumps({k: r.get(k) for k in
('timings','peak_memory','hardware','metrics','baseline_metrics')}, indent=1))" /tmp/gpu_check_point/results.json
    cp /tmp/gpu_check_point/results.json "$out/point_results.json" 2>/dev/null
  fi
  if [ "${DRAFT:-1}" = 1 ]; then
    # drafted decoding (issues 33, 42): a pass of k tokens against a decode step (the ceiling), then the drafted
    # benchmark at the eval batch, few-shot (gsm8k_cot) and zero-shot (MATH, "Problem: ... Solution:"), each with
    # the unedited model by prompt lookup. Random weights: the timings and pass counts mean something, the answers not.
    t0=$SECONDS
    "$py" experiments/benchmarks/bench_pass_cost.py --model "$model" --dtype bfloat16 --device cuda --batch 8 "${EVAL_BATCH:-32}" \
      --out "$out/pass_cost.json" 2>&1 | grep -v Loading | tail -n 26
    "$py" experiments/benchmarks/bench_eval.py --draft --model "$model" --dtype bfloat16 --device cuda \
      --batch-size "${EVAL_BATCH:-32}" --limit "${DRAFT_QUESTIONS:-64}" --chunk "${EVAL_BATCH:-32}" --data-dir "$gpu/data" \
      --cache-dir /tmp/gpu_check_bench --out "$out/draft.json" > "$out/draft.log" 2>&1
    echo "draft: rc $? in $((SECONDS - t0)) s"; grep -A10 '^| edit' "$out/draft.log"
    t0=$SECONDS
    "$py" experiments/benchmarks/bench_eval.py --draft --task math_zeroshot --model "$model" --dtype bfloat16 --device cuda \
      --batch-size "${EVAL_BATCH:-32}" --limit "${DRAFT_QUESTIONS:-64}" --chunk "${EVAL_BATCH:-32}" --data-dir "$gpu/data" \
      --cache-dir /tmp/gpu_check_bench --out "$out/draft_math.json" > "$out/draft_math.log" 2>&1
    echo "draft (zero-shot): rc $? in $((SECONDS - t0)) s"; grep -A10 '^| edit' "$out/draft_math.log"
  fi
  if [ "${SUITE:-1}" = 1 ]; then
    t0=$SECONDS
    # SIGINT at the limit: pytest still prints its summary, so the failures' names come back
    timeout -s INT -k 20 "${SUITE_TIMEOUT:-240}" "$py" -m pytest -q -p no:cacheprovider -p no:benchmark -n 12 \
      -m "not slow" --timeout 120 -rf --durations=10 > "$out/suite.log" 2>&1
    echo "suite: rc $? in $((SECONDS - t0)) s"; tail -n 25 "$out/suite.log"
  fi
}

case $mode in
  prepare) prepare ;;
  run) run ;;
  *) echo "usage: gpu_check.sh prepare|run" >&2; exit 2 ;;
esac
