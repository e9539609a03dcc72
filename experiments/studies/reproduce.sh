#!/usr/bin/env bash
# The reproduction of issue 6 on Qwen2.5-Coder-0.5B-Instruct, sized for a 2-core CPU.
#   bash experiments/studies/reproduce.sh STAGE [extra Hydra overrides]
# Another model of ../shared/models: MODEL=smollm2_135m GGUF=smollm2-135m ROOT=outputs/sweeps/reproduce_smollm2
# (DIGITS=1: the grid's arithmetic probe with 1-digit operands, for models that cannot add 2 digits;
#  append 'eval.arith.operations=["+"]' to drop subtraction, as experiments/studies/smollm2.md does)
# Stages (each is a resumable multirun under $ROOT/<stage>; rerunning skips finished points):
#   grid         top_k {0.1,1,5,10,15 %} x {mathneuro, wanda, random, lape} (RACE filter)
#                + mathneuro with the MMLU filter, seeds 0,1,2 (bootstrap draws of N samples),
#                evaluated with the probes: 2-digit +/- arithmetic (50), multiple choice (40), ppl
#                (LAPE: top_k is a share of all MLP neurons, method.share=all; rerunning the grid over
#                 results made before issue 13 recomputes only the LAPE points)
#   paper_tasks  seed 0, top_k 15 %, the same five methods, evaluated on GSM8K test
#                (8-shot CoT, first 20), RACE-high test (lm-eval, first 10), MMLU test (lm-eval, 1 per subject)
#   one_sample   mathneuro identified from ONE math and ONE filter sample, seeds 0,1,2, grid evaluation
#   data_efficiency  selections (top_k 15 %) from N in {1,10,100,500}, two independent draws (seeds 0,1)
#   scaling_search   Optuna over the scale factor in [1.0,1.5] (top_k 5 %) for mathneuro and random,
#                on the validation problems (arithmetic drawn with seed 1), constraint: MC may not drop
#   scaling_test     the best scalar of each search and s=1.1 on the test problems (arithmetic seed 0,
#                GSM8K test CoT first 30, MC), seeds 0,1,2
#   paired       per-example records for paired intervals (issue 16): top_k $PAIRED_TOPK (0.05,0.15) x
#                {mathneuro, random, wanda} (RACE filter) + {mathneuro, random} (MMLU filter), seeds $PAIRED_SEEDS
#                (0,1,2), the grid's probes with eval.log_samples=true, in $DTYPE (float32: bf16 is slow on a CPU
#                without bf16 units); and scaling M by s = 1.1 at top_k 5 % (mathneuro, random) on the scaling
#                test problems (arithmetic seed 0, 100) and MC; then mathneuro-report -> $RESULTS/paired
#   report       figures and tables into experiments/results/reproduce/
# Identification data: GSM8K train (question + worked solution), RACE-high dev, MMLU validation.
# Evaluation never reads those files.
set -euo pipefail
cd "$(dirname "$0")/../.."
source experiments/lib/stages.sh
stage=${1:?usage: reproduce.sh STAGE [overrides]}
shift
models=${MODELS:-$HOME/.cache/mathneuro/gguf}
model=${MODEL:-qwen2_5_coder_0_5b}
gguf=${GGUF:-qwen2.5-coder-0.5b}
bash ../shared/models/fetch-models.sh "$models" "$gguf" >/dev/null
data=$(cd ../shared/data && pwd)
root=${ROOT:-outputs/sweeps/reproduce}
N=${N:-200}
identification_sets "$data"
common=(model="$model" model.name_or_path="$models/$gguf/model.gguf" "${math[@]}"
        max_length=512 batch_size=8 eval.data_dir="$data" progress=false)
probes=(eval=probes 'eval.tasks=[arith,mc,ppl]' eval.arith.digits="${DIGITS:-2}" eval.arith.num_problems=50)
paper=(eval=paper 'eval.tasks=[gsm8k_gen,race,mmlu]' eval.limits.gsm8k_gen=20 eval.limits.race=10
       eval.limits.mmlu=1 eval.batch_size=8)
# validation and test problems of the scaling study: disjoint draws of the arithmetic probe
scale_val=(eval=probes 'eval.tasks=[arith,mc]' eval.arith.digits=2 eval.arith.num_problems=100 eval.arith.seed=1)
scale_test=(eval=probes 'eval.tasks=[arith,gsm8k_gen,mc]' eval.arith.digits=2 eval.arith.num_problems=100
            eval.arith.seed=0 eval.limits.gsm8k_gen=30)
run() { sweep "${common[@]}" "$@"; }  # experiments/lib/stages.sh

case $stage in
  grid)
    run "${race[@]}" "${probes[@]}" num_samples="$N" seed=0,1,2 method=mathneuro,random,wanda,lape \
        top_k=0.001,0.01,0.05,0.10,0.15 hydra.sweep.dir="$root/grid/race" "$@"
    run "${mmlu[@]}" "${probes[@]}" num_samples="$N" seed=0,1,2 method=mathneuro \
        top_k=0.001,0.01,0.05,0.10,0.15 hydra.sweep.dir="$root/grid/mmlu" "$@" ;;
  paper_tasks)
    run "${race[@]}" "${paper[@]}" num_samples="$N" seed=0 method=mathneuro,random,wanda,lape \
        top_k=0.15 hydra.sweep.dir="$root/paper_tasks/race" "$@"
    run "${mmlu[@]}" "${paper[@]}" num_samples="$N" seed=0 method=mathneuro \
        top_k=0.15 hydra.sweep.dir="$root/paper_tasks/mmlu" "$@" ;;
  one_sample)
    run "${race[@]}" "${probes[@]}" num_samples=1 seed=0,1,2 method=mathneuro top_k=0.05,0.15 \
        hydra.sweep.dir="$root/one_sample" "$@" ;;
  data_efficiency)
    run "${race[@]}" eval=none save_selection=true method=mathneuro top_k=0.15 \
        num_samples=1,10,100,500 seed=0,1 hydra.sweep.dir="$root/data_efficiency" "$@" ;;
  scaling_search)
    for m in mathneuro random; do
      run "${race[@]}" "${scale_val[@]}" hparams_search=optuna_scalar num_samples="$N" seed=0 method=$m \
          objective.metric=math/arith/exact_match objective.constraint=nonmath/mc/acc \
          hydra.sweeper.n_trials=${TRIALS:-8} hydra.sweep.dir="$root/scaling_search/$m" "$@"
    done ;;
  scaling_test)
    for m in mathneuro random; do
      best=$(best_scalar "$root/scaling_search/$m") || exit 2
      echo "$m: best scalar on validation = $best"
      run "${race[@]}" "${scale_test[@]}" intervention=scale num_samples="$N" method=$m \
          intervention.scalar="$best",1.1 seed=0,1,2 hydra.sweep.dir="$root/scaling_test/$m" "$@"
    done ;;
  paired)
    paired=(eval.log_samples=true model.dtype="${DTYPE:-float32}" num_samples="$N" seed="${PAIRED_SEEDS:-0,1,2}")
    topk=top_k="${PAIRED_TOPK:-0.05,0.15}"
    run "${race[@]}" "${probes[@]}" "${paired[@]}" "$topk" method=mathneuro,random,wanda \
        hydra.sweep.dir="$root/paired/race" "$@"
    run "${mmlu[@]}" "${probes[@]}" "${paired[@]}" "$topk" method=mathneuro,random hydra.sweep.dir="$root/paired/mmlu" "$@"
    run "${race[@]}" eval=probes 'eval.tasks=[arith,mc]' eval.arith.digits="${DIGITS:-2}" eval.arith.num_problems=100 \
        eval.arith.seed=0 "${paired[@]}" top_k=0.05 intervention=scale intervention.scalar=1.1 method=mathneuro,random \
        hydra.sweep.dir="$root/paired/scale" "$@"
    "$py" -m mathneuro.cli.report "$root/paired" --out "${RESULTS:-experiments/results/reproduce}/paired" ;;
  report)
    "$py" experiments/studies/summarise_reproduce.py "$root" "${RESULTS:-experiments/results/reproduce}" ;;
  *) echo "unknown stage: $stage" >&2; exit 2 ;;
esac
