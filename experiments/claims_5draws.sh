#!/usr/bin/env bash
# Issue 32: the paper's claims on Qwen2.5-Coder-1.5B-Instruct (bf16) over five identification draws, under
# experiments/ANALYSIS_PLAN.md. Every point writes per-example records (eval.log_samples=true), so that
# experiments/claims.py can pair it with the unedited model and with random editing of the same counts.
#   bash experiments/claims_5draws.sh STAGE [extra Hydra overrides for keys the script does not set]
# Stages (each a resumable Hydra multirun into its own folder under $ROOT; rerunning skips finished points;
# a bad stage name or a bad point stops before anything runs):
#   prune15         pruning at K = 15 %: mathneuro and random (M's per-matrix counts), filters $FILTERS (race mmlu),
#                   draws $DRAWS (0..4), on GSM8K test (first $GSM8K), RACE-high test (first $RACE articles) and MMLU
#                   test ($MMLU per subject)                                            -> $ROOT/prune15/<filter>
#   prune15x        the plan's other methods at K = 15 %, RACE filter, draws $DRAWS, same tasks: $EXTRA_METHODS
#                   (wanda,random_wanda,lape,random_neurons: each with its own-size random reference) -> $ROOT/prune15x/race
#   generalisation  M from GSM8K train against $GEN_FILTER (mmlu), K = 15 %, pruned, and random, draws $GEN_DRAWS, on
#                   MATH (minerva_math, $GEN_MATH per subject x 7, judged by math_answers_equal: math_verify), MathQA,
#                   EGSM; HellaSwag, PIQA, WinoGrande, MuTual (limits below)      -> $ROOT/generalisation/tasks
#                   then WikiText (the first $GEN_WIKITEXT articles) in a multirun of its own: rolling log-likelihood
#                   windows of eval.max_length 2048 tokens at eval.batch_size 1 (lm-eval's full-vocabulary log-softmax
#                   over 8 windows of a 32k context took 17 GB and was killed)   -> $ROOT/generalisation/wikitext
#   prune5          the prune15 stage at K = 5 %                                          -> $ROOT/prune5/<filter>
#   search          K and s searched together for mathneuro ($SEARCH_FILTER, draw $SEARCH_DRAW) on a validation split of
#                   GSM8K *train* questions drawn by no identification draw (scaling_search.py validation; $VAL_N
#                   questions, gsm8k_gen = lm-eval gsm8k_cot on that file), MMLU dev as the multiple-choice constraint
#                   (the MC probe on mmlu/dev.jsonl; 0-shot MMLU test never reads dev). SEARCH=tpe: Optuna TPE
#                   (hparams_search=optuna_topk_scalar), $TRIALS trials of which $STARTUP random start-up trials;
#                   SEARCH=grid: top_k $GRID_K x s $GRID_S. Best: the largest objective, ties to the smaller K,
#                   then s (scaling_search.py best); the trace in $ROOT/search/trace.{md,csv} -> $ROOT/search
#   search_test     the search's best (K*, s*): mathneuro and random (same counts, same s), $SEARCH_FILTER, draws
#                   $TEST_DRAWS, on GSM8K test, MATH ($SCALE_MATH per subject), RACE and MMLU test (nothing to do when
#                   the best is K = 5 %, s = 1.1 on a filter of $SCALE_FILTERS: the scale stage has it) -> $ROOT/search_test
#   scale           core scaling, K = 5 %, s = 1.1: mathneuro and random, filters $SCALE_FILTERS (mmlu), draws $DRAWS,
#                   the same tasks and baseline as search_test                             -> $ROOT/scale/<filter>
#   claim4          one identification at K = 15 % (draw 0, $GEN_FILTER) with save_selection=true, no evaluation,
#                   then experiments/claim4_size.py -> $RESULTS/claim4_size.{json,md}  -> $ROOT/claim4
#   pilot           one point of each kind at a few examples (timings for the budget)  -> $ROOT/pilot/*
#   check           validate every point of every stage above (check_points.py; no model loads) and stop
#   governed        prune15, generalisation, prune5, search, search_test, scale, prune15x, one after the other
#   report          mathneuro-report of every stage folder into $RESULTS/<stage>; the search trace into
#                   $RESULTS/search/trace.{md,csv}
# Environment (defaults): MODEL (qwen2_5_coder_1_5b) GGUF (qwen2.5-coder-1.5b) MODELS (/root/.cache/mathneuro-models)
#   DATA (../shared/data) ROOT (/work/exp-outputs/claims_5draws: run dirs, never committed) CACHE (/work/exp-cache/governed:
#   converted model, statistics, baselines) RESULTS (experiments/results/claims_5draws) DTYPE (bfloat16: this CPU has
#   avx512_bf16; GSM8K runs 3.2x faster than in float32) N (100 samples per set) DRAWS (0,1,2,3,4) FILTERS ("race mmlu")
#   GSM8K (300) RACE (300 articles) MMLU (10 per subject: 570)
#   EXTRA_METHODS (wanda,random_wanda,lape,random_neurons) GEN_FILTER (mmlu) GEN_DRAWS ($DRAWS) GEN_MATH (72 per subject:
#   504; the plan's MATH-500 has no data here, math/test.jsonl is the full MATH test) GEN_MATHQA (500) GEN_EGSM (300)
#   GEN_HELLASWAG (500) GEN_PIQA (500) GEN_WINOGRANDE (500) GEN_MUTUAL (500) GEN_WIKITEXT (62: every article)
#   SEARCH (grid) TRIALS (30) STARTUP (10) GRID_K (0.01,0.025,0.05,0.1,0.15) GRID_S (1.02,1.05,1.1,1.2,1.3) SEARCH_FILTER (mmlu)
#   SEARCH_DRAW (0) VAL_SIZE (200: the first 200 GSM8K train questions in file order that draws $VAL_EXCLUDE (the search's
#   draw) did not sample) VAL_N (all of them) VAL_FILE ($CACHE/data/gsm8k_val_first200_excl0.jsonl) MC_VAL (285: all of MMLU dev)
#   TEST_DRAWS ($DRAWS) SCALE_MATH (72 per subject: 504) SCALE_FILTERS (mmlu)
#   OMP_NUM_THREADS as usual (2 here). CHECK_ONLY=1: validate the stage's points and stop.
# Budget (measured on this CPU: /work/notes/budget.md and experiments/studies/claims_5draws.md, "Budget").
set -euo pipefail
shopt -s inherit_errexit
cd "$(dirname "$0")/.."
source experiments/lib.sh
STAGES=(prune15 generalisation prune5 search search_test scale prune15x claim4 pilot check governed report)
GOVERNED=(prune15 generalisation prune5 search search_test scale prune15x)
usage="usage: claims_5draws.sh STAGE [overrides]   (STAGE: ${STAGES[*]})"
stage=${1:?$usage}
shift
extra=("$@")
case " ${STAGES[*]} " in *" $stage "*) ;; *) die "unknown stage: $stage ($usage)" ;; esac

model=${MODEL:-qwen2_5_coder_1_5b}
gguf=${GGUF:-qwen2.5-coder-1.5b}
models=${MODELS:-/root/.cache/mathneuro-models}
weights="$models/$gguf/model.gguf"
root=${ROOT:-/work/exp-outputs/claims_5draws}
cache=${CACHE:-/work/exp-cache/governed}
results=${RESULTS:-experiments/results/claims_5draws}
DTYPE=${DTYPE:-bfloat16} N=${N:-100} DRAWS=${DRAWS:-0,1,2,3,4} FILTERS=${FILTERS:-race mmlu}
GSM8K=${GSM8K:-300} RACE=${RACE:-300} MMLU=${MMLU:-10}
GEN_FILTER=${GEN_FILTER:-mmlu} GEN_DRAWS=${GEN_DRAWS:-$DRAWS} SCALE_FILTERS=${SCALE_FILTERS-mmlu}
SEARCH=${SEARCH:-grid} SEARCH_FILTER=${SEARCH_FILTER:-mmlu} SEARCH_DRAW=${SEARCH_DRAW:-0}
VAL_SIZE=${VAL_SIZE:-200} VAL_EXCLUDE=${VAL_EXCLUDE:-$SEARCH_DRAW} VAL_N=${VAL_N:-$VAL_SIZE} TEST_DRAWS=${TEST_DRAWS:-$DRAWS}
VAL_FILE=${VAL_FILE:-$cache/data/gsm8k_val_first${VAL_SIZE}_excl${VAL_EXCLUDE//,/-}.jsonl}
case $SEARCH in tpe | grid) ;; *) die "SEARCH=$SEARCH: expected tpe or grid" ;; esac
for f in $FILTERS $GEN_FILTER $SEARCH_FILTER $SCALE_FILTERS; do
  case $f in race | mmlu) ;; *) die "filter $f: expected race or mmlu (FILTERS, GEN_FILTER, SEARCH_FILTER, SCALE_FILTERS)" ;; esac
done

[ -d "${DATA:-../shared/data}" ] || die "no data folder ${DATA:-../shared/data} (set DATA=<the shared data folder>)"
data=$(cd "${DATA:-../shared/data}" && pwd)
need_files "$data" gsm8k/train.jsonl gsm8k/test.jsonl race/validation_high.jsonl race/test_high_by_article.jsonl \
  mmlu/validation_prerelease.jsonl mmlu/dev.jsonl math/test.jsonl mathqa/test_1000.jsonl egsm/egsm_full.jsonl \
  hellaswag/validation.jsonl piqa/validation.jsonl winogrande/validation.jsonl wikitext2/test.jsonl mutual/validation.jsonl
[ "$stage" = report ] || [ -f "$weights" ] || die "no model at $weights; fetch it with:
  bash ../shared/models/fetch-models.sh $models $gguf"
case $root in "$PWD"/* | [!/]*) die "ROOT=$root lies inside the repository: run dirs stay outside it" ;; esac
identification_sets "$data"
filter_of() { case $1 in race) echo "${race[@]}" ;; mmlu) echo "${mmlu[@]}" ;; esac; }

common=(model="$model" model.name_or_path="$weights" model.dtype="$DTYPE" model.device=auto "${math[@]}"
        max_length=512 batch_size=8 num_samples="$N" eval.data_dir="$data" eval.batch_size=8 eval.log_samples=true
        progress=false cache_dir="$cache")
# the core claims: GSM8K test (8-shot CoT), RACE-high test, MMLU test (0-shot; the limit is per subject)
core_eval=(eval=paper 'eval.tasks=[gsm8k_cot,race,mmlu]' eval.limits.gsm8k_cot="$GSM8K" eval.limits.race="$RACE"
           eval.limits.mmlu="$MMLU")
gen_eval=(eval=generalisation 'eval.tasks=[minerva_math,mathqa,egsm,hellaswag,piqa,winogrande,mutual]'
          eval.limits.minerva_math="${GEN_MATH:-72}" eval.limits.mathqa="${GEN_MATHQA:-500}" eval.limits.egsm="${GEN_EGSM:-300}"
          eval.limits.hellaswag="${GEN_HELLASWAG:-500}" eval.limits.piqa="${GEN_PIQA:-500}"
          eval.limits.winogrande="${GEN_WINOGRANDE:-500}" eval.limits.mutual="${GEN_MUTUAL:-500}")
# WikiText apart: one 2048-token window at a time (a window's log-softmax over 152k tokens is 1.2 GB in float32)
ppl_eval=(eval=generalisation 'eval.tasks=[wikitext]' eval.limits.wikitext="${GEN_WIKITEXT:-62}" eval.batch_size=1
          eval.max_length=2048)
# scaling tests: the core tasks and MATH (claim 3's two math tests, and its "non-math unchanged")
scale_eval=(eval=paper 'eval.tasks=[gsm8k_cot,minerva_math,race,mmlu]' eval.limits.gsm8k_cot="$GSM8K"
            eval.limits.minerva_math="${SCALE_MATH:-72}" eval.limits.race="$RACE" eval.limits.mmlu="$MMLU")
# the search's validation: held-out GSM8K train questions (gsm8k_gen = gsm8k_cot on that file), MMLU dev as the constraint
set_val_eval() {  # set_val_eval QUESTIONS MC_QUESTIONS
  val_eval=(eval=probes 'eval.tasks=[gsm8k_gen,mc]' eval.gsm8k_gen.file="$VAL_FILE" eval.limits.gsm8k_gen="$1"
            eval.mc.file="$data/mmlu/dev.jsonl" eval.limits.mc="$2"
            "objective.metric='math/gsm8k_gen/exact_match,strict-match'" objective.constraint=nonmath/mc/acc
            objective.tolerance=0.02)
}
set_val_eval "$VAL_N" "${MC_VAL:-285}"

# sweep OVERRIDE...: one multirun; with mode=check only composed and validated (no model loads)
sweep() {
  if [ "$mode" = check ]; then
    "$py" experiments/check_points.py "${common[@]}" "$@" "${extra[@]}" >/dev/null || exit 2
  else
    echo "[$(date -u +%FT%TZ)] $stage: mathneuro -m ... $*" >&2
    "$py" -m mathneuro -m "${common[@]}" "$@" "${extra[@]}"
  fi
}

# the validation questions: written once, also by a check (a second, outside the repository), identical for every later run
validation_file() {
  [ -f "$VAL_FILE" ] && return
  "$py" experiments/scaling_search.py validation --data "$data" --out "$VAL_FILE" --draws "$VAL_EXCLUDE" \
    --num-samples "$N" --size "$VAL_SIZE" --order file
}

best_point() {  # "K S" of the search's best trial; before the search has run (check mode) a stand-in
  local expect=${TRIALS:-30}
  if [ "$SEARCH" = grid ]; then  # every grid point: a second worker may still be running one
    expect=$(( $(tr ',' '\n' <<<"${GRID_K:-0.01,0.025,0.05,0.1,0.15}" | wc -l) * $(tr ',' '\n' <<<"${GRID_S:-1.02,1.05,1.1,1.2,1.3}" | wc -l) ))
  fi
  if [ "$mode" = check ]; then  # before the search is complete, the point is checked at a stand-in (K, s)
    "$py" experiments/scaling_search.py best "$root/search" --expect "$expect" 2>/dev/null || echo "0.05 1.1"
    return
  fi
  "$py" experiments/scaling_search.py best "$root/search" --expect "$expect" || die "the search under $root/search is not complete"
}

prune_stage() {  # prune_stage K FOLDER
  local f
  for f in $FILTERS; do
    # shellcheck disable=SC2046  # filter_of's words are single overrides
    sweep $(filter_of "$f") "${core_eval[@]}" top_k="$1" seed="$DRAWS" method=mathneuro,random \
          hydra.sweep.dir="$root/$2/$f"
  done
}

run_stage() {
  local f k s
  case $stage in
    prune15) prune_stage 0.15 prune15 ;;
    prune5) prune_stage 0.05 prune5 ;;
    prune15x)  # the plan's other methods at K = 15 %, RACE filter, each with its own-size random reference
      sweep "${race[@]}" "${core_eval[@]}" top_k=0.15 seed="$DRAWS" \
            method="${EXTRA_METHODS:-wanda,random_wanda,lape,random_neurons}" hydra.sweep.dir="$root/prune15x/race" ;;
    generalisation)
      # shellcheck disable=SC2046
      sweep $(filter_of "$GEN_FILTER") "${gen_eval[@]}" top_k=0.15 seed="$GEN_DRAWS" method=mathneuro,random \
            hydra.sweep.dir="$root/generalisation/tasks"
      # shellcheck disable=SC2046
      sweep $(filter_of "$GEN_FILTER") "${ppl_eval[@]}" top_k=0.15 seed="$GEN_DRAWS" method=mathneuro,random \
            hydra.sweep.dir="$root/generalisation/wikitext" ;;
    search)
      validation_file
      if [ "$SEARCH" = tpe ]; then
        # shellcheck disable=SC2046
        sweep $(filter_of "$SEARCH_FILTER") "${val_eval[@]}" hparams_search=optuna_topk_scalar method=mathneuro \
              seed="$SEARCH_DRAW" hydra.sweeper.n_trials="${TRIALS:-30}" \
              hydra.sweeper.sampler.n_startup_trials="${STARTUP:-10}" hydra.sweep.dir="$root/search"
      else
        # shellcheck disable=SC2046
        sweep $(filter_of "$SEARCH_FILTER") "${val_eval[@]}" intervention=scale method=mathneuro seed="$SEARCH_DRAW" \
              top_k="${GRID_K:-0.01,0.025,0.05,0.1,0.15}" intervention.scalar="${GRID_S:-1.02,1.05,1.1,1.2,1.3}" \
              hydra.sweep.dir="$root/search"
      fi
      if [ "$mode" = run ]; then
        "$py" experiments/scaling_search.py trace "$root/search" --out "$root/search/trace.md" --csv "$root/search/trace.csv"
      fi ;;
    search_test)
      local bp
      bp=$(best_point) || exit 2
      read -r k s <<<"$bp"
      [ "$mode" = check ] || echo "search: best K = $k, s = $s on the validation questions" >&2
      if [ "$k" = 0.05 ] && [ "$s" = 1.1 ] && [[ " $SCALE_FILTERS " == *" $SEARCH_FILTER "* ]]; then
        [ "$mode" = check ] || echo "search_test: the best is the scale stage's point (K = 0.05, s = 1.1): nothing to add" >&2
        return 0
      fi
      # shellcheck disable=SC2046
      sweep $(filter_of "$SEARCH_FILTER") "${scale_eval[@]}" intervention=scale top_k="$k" intervention.scalar="$s" \
            seed="$TEST_DRAWS" method=mathneuro,random hydra.sweep.dir="$root/search_test" ;;
    scale)
      for f in $SCALE_FILTERS; do
        # shellcheck disable=SC2046
        sweep $(filter_of "$f") "${scale_eval[@]}" intervention=scale top_k=0.05 intervention.scalar=1.1 \
              seed="$DRAWS" method=mathneuro,random hydra.sweep.dir="$root/scale/$f"
      done ;;
    claim4)
      # shellcheck disable=SC2046
      sweep $(filter_of "$GEN_FILTER") eval=none save_selection=true method=mathneuro top_k=0.15 seed=0 \
            hydra.sweep.dir="$root/claim4"
      if [ "$mode" = run ]; then  # with M's size and block spread over every prune15 point that exists by then
        local -a c4=(--gguf "$model=$weights" --run "$root/claim4")
        [ ! -f "$models/qwen2.5-coder-0.5b/model.gguf" ] || c4+=(--gguf "qwen2_5_coder_0_5b=$models/qwen2.5-coder-0.5b/model.gguf")
        for f in $FILTERS; do [ ! -d "$root/prune15/$f" ] || c4+=(--points "$root/prune15/$f"); done
        "$py" experiments/claim4_size.py "${c4[@]}" --out "$results/claim4_size"
      fi ;;
    pilot)  # a few examples per task; the per-task seconds are in each point's cli.log ("eval <task>: ... (x s)")
      validation_file
      sweep "${race[@]}" eval=generalisation 'eval.tasks=[minerva_math,mathqa,egsm,hellaswag,piqa,winogrande,mutual]' \
            eval.limits.minerva_math=2 eval.limits.mathqa=16 eval.limits.egsm=8 eval.limits.hellaswag=16 \
            eval.limits.piqa=16 eval.limits.winogrande=16 eval.limits.mutual=16 \
            top_k=0.15 seed=0 method=mathneuro hydra.sweep.dir="$root/pilot/generalisation"
      sweep "${race[@]}" eval=generalisation 'eval.tasks=[wikitext]' eval.limits.wikitext=2 eval.batch_size=1 eval.max_length=2048 \
            top_k=0.15 seed=0 method=mathneuro hydra.sweep.dir="$root/pilot/wikitext"
      set_val_eval 8 57
      sweep "${race[@]}" "${val_eval[@]}" intervention=scale top_k=0.05 intervention.scalar=1.1 \
            seed=0 method=mathneuro hydra.sweep.dir="$root/pilot/search"
      sweep "${race[@]}" eval=paper 'eval.tasks=[gsm8k_cot,race,mmlu]' eval.limits.gsm8k_cot=8 eval.limits.race=8 \
            eval.limits.mmlu=1 top_k=0.15 seed=0 method=mathneuro,random hydra.sweep.dir="$root/pilot/core"
      sweep "${mmlu[@]}" eval=none save_selection=true top_k=0.15 seed=0 method=mathneuro hydra.sweep.dir="$root/pilot/mmlu" ;;
    report)
      [ "$mode" = run ] || return 0
      local d found=0
      for d in prune15/race prune15/mmlu prune5/race prune5/mmlu prune15x/race generalisation/tasks generalisation/wikitext \
               search search_test scale/race scale/mmlu; do
        [ -d "$root/$d" ] || continue
        found=1
        "$py" -m mathneuro.report_cli "$root/$d" --out "$results/$d"
      done
      if [ -d "$root/search" ]; then
        "$py" experiments/scaling_search.py trace "$root/search" --out "$results/search/trace.md" --csv "$results/search/trace.csv"
      fi
      [ "$found" = 1 ] || die "nothing to report under $root" ;;
  esac
}

if [ "$stage" = check ] || [ "$stage" = governed ]; then  # every governed stage checked before the first one runs
  top=$stage
  for s in "${GOVERNED[@]}" claim4; do
    stage=$s
    mode=check run_stage
    echo "$s: every point is valid" >&2
  done
  [ "$top" = governed ] || exit 0
  for s in "${GOVERNED[@]}"; do bash "$0" "$s" "${extra[@]}" || exit; done
  exit 0
fi
mode=check run_stage
[ -z "${CHECK_ONLY:-}" ] || { echo "$stage: every point is valid (CHECK_ONLY set: nothing run)"; exit 0; }
mode=run run_stage
