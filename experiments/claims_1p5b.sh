#!/usr/bin/env bash
# Issue 16: the paper's claims (docs/method.md#6-the-papers-claims) on Qwen2.5-Coder-1.5B-Instruct, where RACE and MMLU can fail,
# with per-example records everywhere so that the report pairs every edit with the unedited model and
# with random pruning/scaling of the same counts on the same examples (paired.csv, bootstrap intervals).
#   bash experiments/claims_1p5b.sh STAGE [extra Hydra overrides for keys the script does not set]
# Stages (each a resumable Hydra multirun under $ROOT/<stage>; rerunning skips finished points):
#   budget          one `random` point from 16 + 16 samples, evaluated on a sliver of the test sets
#                   (MMLU 1 per subject, RACE 2 articles, GSM8K 8, arithmetic 20): the timings in its
#                   results.json (load, statistics, baseline and edited evaluation) size the rest
#   core            what fits one 3-hour session on 2 CPU cores (about 2.7 CPU-hours): the MMLU filter, draw
#                   $CORE_SEED (0); mathneuro, random, wanda at top_k 0.15 ($METHODS, in that order), evaluated on
#                   arithmetic and MMLU test only (MMLU is where the unedited 1.5B is above chance). A point peaks
#                   at 13.5-15.5 GB in float32, so two workers need >= 32 GB; a second one starts with
#                   METHODS=wanda,random,mathneuro, so it begins with the point that needs no filter statistics
#   core_race       the RACE filter's share of `prune` that fits a session: draw $CORE_SEED (0), $METHODS
#                   (mathneuro,random) at top_k 0.15, evaluated on arithmetic, RACE-high test (first $RACE articles)
#                   and MMLU test; it also measures the unedited 1.5B on RACE (is RACE testable on this model?)
#   core_scaling    claim 3 where math has room to rise (the unedited 1.5B solves all 2-digit +/-): M scaled at
#                   top_k 0.05 (MMLU filter, draw $CORE_SEED) against random scaling of the same counts, on 2-digit
#                   multiplication ($CORE_OPS). First Optuna over s in [1.0, 1.5] ($TRIALS trials) on a validation
#                   draw (100 problems drawn with seed 1, the MC probe as the constraint), then s = 1.1 and the best
#                   s on the test draw ($CORE_ARITH problems, seed 0) + the MC probe, mathneuro and random
#   core_scaling_mmlu  "non-math unchanged" of claim 3 where it can fail: the same edits (top_k 0.05, MMLU filter, draw
#                   $CORE_SEED, s in $SCALARS (1.1)), mathneuro and random, on the multiplication test draw and MMLU test
#   core_gsm8k      GSM8K test (lm-eval gsm8k_cot, first $GSM8K questions) on the MMLU filter's draw $CORE_SEED
#                   (GSM8K_FILTER=race: the RACE filter's, into the same folders; the report keeps filters apart): scaling
#                   at top_k 0.05 (s in $SCALARS) into core_gsm8k/scale, then pruning at top_k $TOPK (0.15) into core_gsm8k/prune,
#                   mathneuro and random each (METHODS sets the pruning's: wanda,random_wanda,lape,random_neurons). Meant for
#                   DTYPE=bfloat16 on a CPU with bf16 units (~3.5 s a question on 2 threads); its points pair with
#                   their own unedited baseline, computed in the same dtype. GSM8K_PARTS=prune (or scale) runs one half
#   prune           top_k $TOPK: mathneuro, random, wanda, random_wanda (random at Wanda's size), lape,
#                   random_neurons (RACE filter; METHODS sets them); mathneuro and random (MMLU filter); seeds $SEEDS (bootstrap draws of N samples per set). Evaluated on test splits:
#                   arithmetic (2-digit +/-, seed 0), GSM8K test (lm-eval gsm8k_cot, 8-shot, prefix cache, first $GSM8K),
#                   RACE-high test (lm-eval, first $RACE articles), MMLU test (lm-eval, $MMLU per subject)
#   scaling_search  Optuna over s in [1.0, 1.5] at top_k 0.05 (RACE filter, seed 0) for each method of
#                   $SEARCH, on a validation draw: arithmetic drawn with seed 1 + the MC probe (constraint)
#   scaling_test    s = 1.1 and mathneuro's best s (and random's, if searched) for mathneuro and random
#                   (same counts) at seeds $SEEDS: arithmetic (seed 0), GSM8K test ($GSM8K), MMLU test
#   data_efficiency selections (mathneuro, top_k 0.15, RACE filter; DE_FILTER=mmlu: the MMLU filter, into
#                   data_efficiency_mmlu) from N in $DE_N (1,10,$N), seeds $SEEDS, not
#                   evaluated: the overlap of two draws' M and math top-K sets (the N = $N draws reuse prune's
#                   cached statistics)
#   all             prune, scaling_search, scaling_test, data_efficiency, bf16, report, one after the other
#                   (several processes may run it at once: they share the points, none is run twice; the
#                   Optuna search runs in one of them while the others wait for its result)
#   bf16            experiments/bf16_accumulation.py on this model ($BF16_N + $BF16_N samples, $BF16_LEN tokens)
#   report          mathneuro-report of every stage folder (points.csv, summary.md, paired.csv, figures)
#                   into $RESULTS/<stage>/ (core's prune points into core/, its scale points and search into
#                   core_scaling/{test,search}/)
# Environment (defaults): MODEL (qwen2_5_coder_1_5b) GGUF (qwen2.5-coder-1.5b) MODELS (/root/.cache/mathneuro-models)
#   DATA (../shared/data) ROOT (outputs/sweeps/claims_1p5b) RESULTS (experiments/results/claims_1p5b)
#   DTYPE (float32 without CUDA: a bf16 forward is ~6x slower on a CPU without bf16 units; bfloat16 with CUDA;
#   on a CPU with avx512_bf16, DTYPE=bfloat16 ran GSM8K 3.2x faster: experiments/studies/claims_1p5b.md, budget)
#   N (100) SEEDS (0,1) TOPK (0.15; 0.15,0.05 adds 5 %) MAXLEN (512) GSM8K (100) RACE (20) MMLU (5) ARITH (100)
#   DE_N (1,10,$N) DE_FILTER (race) DIGITS (2) CORE_OPS (["*"]) CORE_ARITH (200) SCALARS (1.1; core_scaling_mmlu, core_gsm8k) TRIALS (8) SEARCH (mathneuro; "mathneuro random" searches random too) BF16_N (96) BF16_LEN (128)
#   CACHE (cache_dir; default mathneuro's). Threads: OMP_NUM_THREADS as usual. CHECK_ONLY=1: validate the
#   stage's points and stop. PRUNE_GSM8K=0 (or GSM8K=0) drops GSM8K from prune: arithmetic only, 2.5x cheaper;
#   the arithmetic probe writes per-example records too, so its rows are paired like GSM8K's.
# Missing model or data, an unknown task name or a limit for a task not evaluated stops a stage before
# anything runs (experiments/check_points.py composes and validates every point first).
# GSM8K runs as lm-eval's gsm8k_cot (what the gsm8k_gen probe wraps, with the same prefix cache). Every
# task evaluated here writes per-example records (the arithmetic and MC probes too), so all are paired.
# The model: bash ../shared/models/fetch-models.sh /root/.cache/mathneuro-models qwen2.5-coder-1.5b
set -euo pipefail
shopt -s inherit_errexit
cd "$(dirname "$0")/.."
source experiments/lib.sh
stage=${1:?usage: claims_1p5b.sh STAGE [overrides]   (STAGE: budget core core_race core_scaling core_scaling_mmlu core_gsm8k prune scaling_search scaling_test data_efficiency bf16 report all)}
shift
extra=("$@")

model=${MODEL:-qwen2_5_coder_1_5b}
gguf=${GGUF:-qwen2.5-coder-1.5b}
models=${MODELS:-/root/.cache/mathneuro-models}
weights="$models/$gguf/model.gguf"
root=${ROOT:-outputs/sweeps/claims_1p5b}
results=${RESULTS:-experiments/results/claims_1p5b}
N=${N:-100} SEEDS=${SEEDS:-0,1} TOPK=${TOPK:-0.15} GSM8K=${GSM8K:-100} RACE=${RACE:-20} MMLU=${MMLU:-5}
ARITH=${ARITH:-100} DIGITS=${DIGITS:-2}

[ -d "${DATA:-../shared/data}" ] || die "no data folder ${DATA:-../shared/data} (set DATA=<the shared data folder>)"
data=$(cd "${DATA:-../shared/data}" && pwd)
need_files "$data" gsm8k/train.jsonl gsm8k/test.jsonl race/validation_high.jsonl race/test_high_by_article.jsonl \
  mmlu/validation_prerelease.jsonl
[ "$stage" = report ] || [ -f "$weights" ] || die "no model at $weights; fetch it with:
  bash ../shared/models/fetch-models.sh $models $gguf"
if [ -z "${DTYPE:-}" ]; then
  DTYPE=$("$py" -c "import torch; print('bfloat16' if torch.cuda.is_available() else 'float32')")
fi
identification_sets "$data"

common=(model="$model" model.name_or_path="$weights" model.dtype="$DTYPE" model.device=auto "${math[@]}"
        max_length="${MAXLEN:-512}" batch_size=8 eval.data_dir="$data" eval.batch_size=8 eval.log_samples=true
        progress=false ${CACHE:+cache_dir="$CACHE"})
arith() { echo "eval.arith.digits=$DIGITS" 'eval.arith.operations=["+","-"]' "eval.arith.num_problems=$1" "eval.arith.seed=$2"; }
# shellcheck disable=SC2046  # arith's words are single tokens
PRUNE_GSM8K=${PRUNE_GSM8K:-$GSM8K}  # 0: prune evaluated without GSM8K (the issue allows arithmetic)
gsm=(gsm8k_cot, eval.limits.gsm8k_cot="$PRUNE_GSM8K")
[ "$PRUNE_GSM8K" != 0 ] || gsm=("")
test_eval=(eval=paper "eval.tasks=[arith,${gsm[0]}race,mmlu]" $(arith "$ARITH" 0) "${gsm[@]:1}"
           eval.limits.race="$RACE" eval.limits.mmlu="$MMLU")
# shellcheck disable=SC2046
core_eval=(eval=paper 'eval.tasks=[arith,mmlu]' $(arith "$ARITH" 0) eval.limits.mmlu="$MMLU")
# shellcheck disable=SC2046
core_race_eval=(eval=paper 'eval.tasks=[arith,race,mmlu]' $(arith "$ARITH" 0) eval.limits.race="$RACE"
                eval.limits.mmlu="$MMLU")
# core_scaling: 2-digit multiplication (the unedited 1.5B solves 0.6 of it) and the MC probe as the non-math check
core_arith() { echo eval.arith.digits=2 "eval.arith.operations=${CORE_OPS:-[\"*\"]}" "eval.arith.num_problems=$1" "eval.arith.seed=$2"; }
# shellcheck disable=SC2046
core_val=(eval=probes 'eval.tasks=[arith,mc]' $(core_arith 100 1))
# shellcheck disable=SC2046
core_test=(eval=probes 'eval.tasks=[arith,mc]' $(core_arith "${CORE_ARITH:-200}" 0))
# shellcheck disable=SC2046
core_test_mmlu=(eval=paper 'eval.tasks=[arith,mmlu]' $(core_arith "${CORE_ARITH:-200}" 0) eval.limits.mmlu="$MMLU")
# shellcheck disable=SC2046
gsm_test=(eval=paper 'eval.tasks=[gsm8k_cot]' eval.limits.gsm8k_cot="$GSM8K")
# shellcheck disable=SC2046
scale_val=(eval=probes 'eval.tasks=[arith,mc]' $(arith "$ARITH" 1))
# shellcheck disable=SC2046
scale_test=(eval=paper 'eval.tasks=[arith,gsm8k_cot,mmlu]' $(arith "$ARITH" 0) eval.limits.gsm8k_cot="$GSM8K"
            eval.limits.mmlu="$MMLU")

# sweep OVERRIDE...: one multirun; with mode=check only composed and validated (no model loads)
sweep() {
  if [ "$mode" = check ]; then
    "$py" experiments/check_points.py "${common[@]}" "$@" "${extra[@]}" >/dev/null || exit 2
  else
    "$py" -m mathneuro -m "${common[@]}" "$@" "${extra[@]}"
  fi
}

scalars() {  # the scale factors of the test: 1.1, then each searched method's best
  local s out=1.1 m
  for m in ${SEARCH:-mathneuro}; do
    s=$(best_scalar "$root/scaling_search/$m") || exit 2
    [ "$mode" = check ] || echo "$m: best scalar on validation = $s" >&2
    case ",$out," in *",$s,"*) ;; *) out="$out,$s" ;; esac
  done
  echo "$out"
}

run_stage() {
  case $stage in
    budget)
      sweep "${race[@]}" eval=paper 'eval.tasks=[arith,gsm8k_cot,race,mmlu]' $(arith 20 0) eval.limits.gsm8k_cot=8 \
            eval.limits.race=2 eval.limits.mmlu=1 num_samples=16 seed=0 method=random top_k=0.15 \
            hydra.sweep.dir="$root/budget" ;;
    prune)
      sweep "${race[@]}" "${test_eval[@]}" num_samples="$N" seed="$SEEDS" \
            method="${METHODS:-mathneuro,random,wanda,random_wanda,lape,random_neurons}" \
            top_k="$TOPK" hydra.sweep.dir="$root/prune/race"
      sweep "${mmlu[@]}" "${test_eval[@]}" num_samples="$N" seed="$SEEDS" method=mathneuro,random \
            top_k="$TOPK" hydra.sweep.dir="$root/prune/mmlu" ;;
    core)  # the part that fits one 3-hour session on 2 CPU cores: the MMLU filter, one draw, arithmetic + MMLU
      sweep "${mmlu[@]}" "${core_eval[@]}" num_samples="$N" seed="${CORE_SEED:-0}" \
            method="${METHODS:-mathneuro,random,wanda}" top_k=0.15 hydra.sweep.dir="$root/core/prune" ;;
    core_race)  # the RACE filter and RACE test, without GSM8K: about 1.5 hours on 2 CPU cores for two methods
      sweep "${race[@]}" "${core_race_eval[@]}" num_samples="$N" seed="${CORE_SEED:-0}" \
            method="${METHODS:-mathneuro,random}" top_k=0.15 hydra.sweep.dir="$root/core_race" ;;
    core_scaling)  # claim 3 on a math test with headroom; about 1.5 CPU-hours on the cached statistics
      sweep "${mmlu[@]}" "${core_val[@]}" hparams_search=optuna_scalar num_samples="$N" seed="${CORE_SEED:-0}" \
            method=mathneuro objective.metric=math/arith/exact_match objective.constraint=nonmath/mc/acc \
            hydra.sweeper.n_trials="${TRIALS:-8}" hydra.sweep.dir="$root/core_scaling_search"
      local s=1.1 best
      if [ "$mode" = run ] || [ -f "$root/core_scaling_search/optimization_results.yaml" ]; then
        best=$(best_scalar "$root/core_scaling_search") || exit 2
        [ "$mode" = check ] || echo "mathneuro: best scalar on validation = $best" >&2
        [ "$best" = 1.1 ] || s="1.1,$best"
      fi  # checked before the search has run: s = 1.1 stands for both
      sweep "${mmlu[@]}" "${core_test[@]}" intervention=scale top_k=0.05 num_samples="$N" seed="${CORE_SEED:-0}" \
            method=mathneuro,random intervention.scalar="$s" hydra.sweep.dir="$root/core/scale" ;;
    core_scaling_mmlu)  # core_scaling's test points judged on MMLU (the MC probe sits at its ceiling on the 1.5B)
      sweep "${mmlu[@]}" "${core_test_mmlu[@]}" intervention=scale top_k=0.05 num_samples="$N" \
            seed="${CORE_SEED:-0}" method=mathneuro,random intervention.scalar="${SCALARS:-1.1}" \
            hydra.sweep.dir="$root/core_scaling_mmlu" ;;
    core_gsm8k)  # GSM8K test on the MMLU (or RACE) filter's selections: scaling at 5 %, then pruning at $TOPK
      [ "$GSM8K" != 0 ] || die "core_gsm8k needs GSM8K > 0"
      local -a gsm_filter
      case ${GSM8K_FILTER:-mmlu} in
        mmlu) gsm_filter=("${mmlu[@]}") ;;
        race) gsm_filter=("${race[@]}") ;;
        *) die "GSM8K_FILTER=${GSM8K_FILTER}: expected mmlu or race" ;;
      esac
      case ${GSM8K_PARTS:-scale,prune} in scale,prune | scale | prune) ;;
        *) die "GSM8K_PARTS=$GSM8K_PARTS: expected scale,prune, scale or prune" ;; esac
      if [[ ${GSM8K_PARTS:-scale,prune} == *scale* ]]; then
        sweep "${gsm_filter[@]}" "${gsm_test[@]}" intervention=scale top_k=0.05 num_samples="$N" seed="${CORE_SEED:-0}" \
              intervention.scalar="${SCALARS:-1.1}" method=mathneuro,random hydra.sweep.dir="$root/core_gsm8k/scale"
      fi
      if [[ ${GSM8K_PARTS:-scale,prune} == *prune* ]]; then
        sweep "${gsm_filter[@]}" "${gsm_test[@]}" top_k="$TOPK" num_samples="$N" seed="${CORE_SEED:-0}" \
              method="${METHODS:-mathneuro,random}" hydra.sweep.dir="$root/core_gsm8k/prune"
      fi ;;
    scaling_search)
      for m in ${SEARCH:-mathneuro}; do
        sweep "${race[@]}" "${scale_val[@]}" hparams_search=optuna_scalar num_samples="$N" seed=0 method="$m" \
              objective.metric=math/arith/exact_match objective.constraint=nonmath/mc/acc \
              hydra.sweeper.n_trials="${TRIALS:-8}" hydra.sweep.dir="$root/scaling_search/$m"
      done ;;
    scaling_test)
      [ "$GSM8K" != 0 ] || die "scaling_test needs GSM8K > 0 (the issue asks for GSM8K test there)"
      local s
      s=$(scalars) || exit 2
      sweep "${race[@]}" "${scale_test[@]}" intervention=scale top_k=0.05 num_samples="$N" \
            method=mathneuro,random intervention.scalar="$s" seed="$SEEDS" hydra.sweep.dir="$root/scaling_test" ;;
    data_efficiency)
      local -a de_filter
      local de_dir=data_efficiency
      case ${DE_FILTER:-race} in
        race) de_filter=("${race[@]}") ;;
        mmlu) de_filter=("${mmlu[@]}") de_dir=data_efficiency_mmlu ;;
        *) die "DE_FILTER=${DE_FILTER}: expected race or mmlu" ;;
      esac
      sweep "${de_filter[@]}" eval=none save_selection=true method=mathneuro top_k=0.15 num_samples="${DE_N:-1,10,$N}" \
            seed="$SEEDS" hydra.sweep.dir="$root/$de_dir" ;;
    bf16)
      local out=$results/bf16_accumulation.json
      if [ "$mode" = check ]; then return; fi
      if [ -f "$out" ]; then echo "$out exists: skipped (delete it to measure again)"; return; fi
      mkdir -p "$results"
      "$py" experiments/bf16_accumulation.py --model "$weights" --dtype "$DTYPE" --num-samples "${BF16_N:-96}" \
        --max-length "${BF16_LEN:-128}" --top-k 0.05 --seed 0 --data-dir "$data" --threads "${OMP_NUM_THREADS:-1}" \
        --out "$out" ;;
    report)
      if [ "$mode" = check ]; then return; fi
      local s found=0 pair
      # source folder under $root : destination under $results
      for pair in core/prune:core core/scale:core_scaling/test core_scaling_search:core_scaling/search core_race:core_race core_scaling_mmlu:core_scaling_mmlu core_gsm8k/scale:core_gsm8k/scale core_gsm8k/prune:core_gsm8k/prune prune:prune \
                  scaling_search:scaling_search scaling_test:scaling_test data_efficiency:data_efficiency data_efficiency_mmlu:data_efficiency_mmlu budget:budget; do
        s=${pair%%:*}
        [ -d "$root/$s" ] || continue
        found=1
        "$py" -m mathneuro.cli.report "$root/$s" --out "$results/${pair#*:}"
      done
      [ "$found" = 1 ] || die "nothing to report under $root" ;;
    *) die "unknown stage: $stage (budget core core_race core_scaling core_scaling_mmlu core_gsm8k prune scaling_search scaling_test data_efficiency bf16 report all)" ;;
  esac
}

if [ "$stage" = all ]; then  # each stage checked just before it runs (scaling_test needs the search's result)
  mkdir -p "$root"
  for s in prune scaling_search scaling_test data_efficiency bf16 report; do
    if [ "$s" = scaling_search ]; then  # one Optuna study at a time: a second worker waits for its result
      flock "$root/.scaling_search.lock" bash "$0" "$s" "${extra[@]}" || exit
    else
      bash "$0" "$s" "${extra[@]}" || exit
    fi
  done
  exit 0
fi
mode=check run_stage
[ -z "${CHECK_ONLY:-}" ] || { echo "$stage: every point is valid (CHECK_ONLY set: nothing run)"; exit 0; }
mode=run run_stage
