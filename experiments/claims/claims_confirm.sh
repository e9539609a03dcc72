#!/usr/bin/env bash
# Issue 53: the confirmatory amendment of ANALYSIS_PLAN.md (2026-12-07, confirmatory), about 12 CPU-hours at one
# thread on an Intel Xeon with AMX (bf16; about 50x that on a CPU without bf16 units, measured). Fresh test examples
# (experiments/confirm/examples.json) and identification draws never run before (seeds 100-103). Stages in priority
# order, each resumable per point; every comparison's points and its baseline run on ONE machine kind:
#   bash experiments/claims/claims_confirm.sh STAGE          (STAGE: one of the list below, or `all` for every stage in order)
#   base1     the unedited model on the fresh examples, one task at a time, undrafted: GSM8K 200, RACE-high 400
#             articles, MMLU 20 per subject (1,140); also the drafts' source              -> $ROOT/base1/<task>
#   claim1    K = 15 %, MMLU filter, mathneuro and random (M's per-matrix counts), draws 100-103: GSM8K 200 (drafted),
#             RACE 400, MMLU 1,140; selections saved                                      -> $ROOT/claim1
#   claim45   identification only (eval=none, selections saved), draws 100-103: RACE filter N = 100 (claim 4); MMLU
#             filter N = 1, 10, 100 (claim 5, and claim 4's MMLU filter)                  -> $ROOT/claim45/{claim4,claim5}
#   base6d    the unedited model on 35 fresh MATH problems per subject (245), undrafted   -> $ROOT/base6d/minerva_math
#   claim6d   M of draws 100-101 (claim 1's identifications), MATH 245 drafted (test 6d)  -> $ROOT/claim6d
#   plan      (also: check) build the fresh data folder, check the committed example lists, then compose and validate
#             every point of every stage (check_points.py; no model loads); prints this machine's kind
#   data      build $ROOT/data: a data folder whose test files hold only the fresh examples, in their committed order
#   drafts    a fresh machine or cache: the unedited answers (GSM8K, MATH) back into the cache as drafts; no model pass
#   pack      finished points, baselines, identifications, claim 5's per-matrix counts -> experiments/records/confirm/
#             (every stage also packs when it finishes; commit records/confirm/ then)
#   keep      before a sitting ends: unfinished points (.partial), unedited evaluations in progress and the raw
#             baseline records -> experiments/records/confirm_keep/, to commit
#   restore   a fresh machine, first: what `keep` kept back under $ROOT and $CACHE (then run `drafts`)
#   workers [N [STAGE...]] N (2) background workers, one thread each, running the stages (default `all`) in order
#   stop      end the workers started by `workers`
# One machine kind: before a stage runs, experiments/claims/pack_confirm.py records this machine's kind (CPU model and
# bf16-kernel flags) or refuses (exit 2) if the stage's comparisons began on another kind. CONFIRM_NEW_KIND=1
# restarts that stage's comparison group (base1+claim1, claim45, base6d+claim6d) on this kind instead. The first stage
# runs only on the amendment's planned kind (the Intel Xeon with AMX) unless CONFIRM_UNPLANNED_KIND=1: bf16 without
# bf16 units is about 50x slower, and the first stage binds every group to its kind.
# Environment (defaults): MODEL (qwen2_5_coder_1_5b) MODELS (/root/.cache/mathneuro-models) DATA (../shared/data)
#   ROOT (/work/exp-outputs/claims_confirm) CACHE (/work/exp-cache/confirm; one subfolder per machine kind)
#   DTYPE (bfloat16) CONFIRM_NEW_KIND (unset) CONFIRM_UNPLANNED_KIND (unset)
set -euo pipefail
shopt -s inherit_errexit
cd "$(dirname "$0")/../.."
source experiments/lib/stages.sh
STAGES=(base1 claim1 claim45 base6d claim6d)
usage="usage: claims_confirm.sh STAGE   (STAGE: ${STAGES[*]} all plan check data drafts pack keep restore workers stop)"
stage=${1:?$usage}
check_stage "$usage" plan check data drafts pack keep restore workers stop

model=${MODEL:-qwen2_5_coder_1_5b}
models=${MODELS:-/root/.cache/mathneuro-models}
weights="$models/qwen2.5-coder-1.5b/model.gguf"
root=${ROOT:-/work/exp-outputs/claims_confirm}
cache_root=${CACHE:-/work/exp-cache/confirm}
records=${RECORDS:-experiments/records}
DTYPE=${DTYPE:-bfloat16}
SEEDS="100 101 102 103"
SEEDS_6D="100 101"
[ -d "${DATA:-../shared/data}" ] || die "no data folder ${DATA:-../shared/data} (set DATA=<the shared data folder>)"
data=$(cd "${DATA:-../shared/data}" && pwd)
need_files "$data" gsm8k/train.jsonl gsm8k/test.jsonl race/validation_high.jsonl race/test_high_by_article.jsonl \
  mmlu/validation_prerelease.jsonl math/test.jsonl
case $root in "$PWD"/* | [!/]*) die "ROOT=$root lies inside the repository: run dirs stay outside it" ;; esac
identification_sets "$data"
fresh="$root/data"
# one cache per machine kind: statistics, the unedited model's answers and drafts made on one kind are never read
# on another (bf16 rounds differently), so a group restarted on a new kind computes everything again
case $stage in
  plan | check | data | pack | keep | restore | stop | workers) cache="$cache_root/plan" ;;
  *) cache="$cache_root/$("$py" -c "import sys; sys.path.insert(0, 'experiments/claims'); import pack_confirm as p
print(p._slug(p.this_machine()))")" ;;
esac

model_src=(model.name_or_path="$weights")
if [ ! -f "$weights" ]; then
  case $stage in plan | check | data | pack | keep | stop) model_src=()
    echo "note: no model at $weights: points are validated without checking the model file" >&2 ;;
  *) die "no model at $weights; fetch it with: bash ../shared/models/fetch-models.sh $models qwen2.5-coder-1.5b" ;;
  esac
fi
common=(model="$model" "${model_src[@]}" model.dtype="$DTYPE" model.device=auto "${math[@]}" max_length=512 batch_size=8
        num_samples=100 eval.data_dir="$fresh" eval.batch_size=8 eval.log_samples=true progress=false cache_dir="$cache")
points=("${common[@]}" eval.baseline=false)
c1_eval=(eval=paper 'eval.tasks=[gsm8k_cot,race,mmlu]' eval.limits.gsm8k_cot=200 eval.limits.race=400 eval.limits.mmlu=20)
d6_eval=(eval=generalisation 'eval.tasks=[minerva_math]' eval.limits.minerva_math=35)

build_data() {  # the fresh examples' data folder (rebuilt only when the committed lists changed)
  local want
  want=$("$py" -c "import json,sys; print(json.load(open(sys.argv[1]))['sha256'])" experiments/confirm/examples.json)
  if [ "$(cat "$fresh/CONFIRM_EXAMPLES" 2>/dev/null)" != "$want" ]; then
    rm -rf "$fresh"
    "$py" experiments/data/confirm_examples.py build --data "$data" --out "$fresh" >/dev/null
  fi
}

packed() {  # packed STUDY METHOD SEED: is that point committed under $records/confirm?
  [ -f "$records/confirm/$1/$2__mmlu__k0.15__prune0.0__n100__seed$3.jsonl.gz" ]
}

# sweep_seeds STUDY "SEEDS" "METHODS" OVERRIDE...: one multirun per seed over the methods not yet packed
sweep_seeds() {
  local study=$1 seed m todo
  for seed in $2; do
    todo=()
    for m in $3; do packed "$study" "$m" "$seed" && [ "$mode" != check ] || todo+=("$m"); done
    if [ ${#todo[@]} -eq 0 ]; then echo "$stage: seed $seed: every point packed, skipped" >&2; continue; fi
    sweep "${@:4}" seed="$seed" method="$(IFS=,; echo "${todo[*]}")"
  done
}

baseline() {  # baseline DIR [--task NAME OVERRIDE...]...: the unedited model, one task at a time
  local out=$1; shift
  if [ "$mode" = check ]; then  # each task's evaluation settings, composed and validated as a point's would be
    local group=() arg
    for arg in "$@" --task; do
      if [ "$arg" = --task ] && [ ${#group[@]} -gt 0 ]; then
        "$py" experiments/claims/check_points.py "${points[@]}" "${mmlu[@]}" method=mathneuro top_k=0.15 \
          "eval.tasks=[${group[0]}]" "${group[@]:1}" >/dev/null || exit 2
        group=()
      elif [ "$arg" != --task ] && [ "$arg" != --seed-drafts ]; then group+=("$arg"); fi
    done
    return 0
  fi
  log "baseline_eval.py $*"
  "$py" experiments/claims/baseline_eval.py --out "$out" "${common[@]}" "$@"
}

run_stage() {
  if [ "$mode" != check ] && [ "$1" != drafts ]; then
    build_data
    "$py" experiments/claims/pack_confirm.py kind "$1" --root "$root" --out "$records" ${CONFIRM_NEW_KIND:+--new-kind} \
      ${CONFIRM_UNPLANNED_KIND:+--unplanned-kind} >/dev/null || exit 2
  fi
  case $1 in
    base1) baseline "$root/base1" --task gsm8k_cot eval=paper eval.limits.gsm8k_cot=200 \
             --task race eval=paper eval.limits.race=400 --task mmlu eval=paper eval.limits.mmlu=20 ;;
    claim1) sweep_seeds prune "$SEEDS" "mathneuro random" "${points[@]}" "${mmlu[@]}" "${c1_eval[@]}" top_k=0.15 \
              save_selection=true hydra.sweep.dir="$root/claim1" ;;
    claim45)  # claim 5's sweep first: it also gives claim 4 its MMLU-filter half
      sweep "${common[@]}" "${mmlu[@]}" eval=none top_k=0.15 seed="${SEEDS// /,}" num_samples=1,10,100 method=mathneuro \
            save_selection=true hydra.sweep.dir="$root/claim45/claim5"
      sweep "${common[@]}" "${race[@]}" eval=none top_k=0.15 seed="${SEEDS// /,}" num_samples=100 method=mathneuro \
            save_selection=true hydra.sweep.dir="$root/claim45/claim4" ;;
    base6d) baseline "$root/base6d" --task minerva_math eval=generalisation eval.limits.minerva_math=35 ;;
    claim6d) sweep_seeds generalisation "$SEEDS_6D" mathneuro "${points[@]}" "${mmlu[@]}" "${d6_eval[@]}" top_k=0.15 \
               hydra.sweep.dir="$root/claim6d" ;;
    drafts) baseline "$root/base1" --seed-drafts --task gsm8k_cot eval=paper eval.limits.gsm8k_cot=200
            if [ -d "$root/base6d/minerva_math" ]; then
              baseline "$root/base6d" --seed-drafts --task minerva_math eval=generalisation eval.limits.minerva_math=35
            fi ;;
  esac
}

pack_quietly() {  # the finished points -> $records/confirm/
  "$py" experiments/claims/pack_confirm.py pack --root "$root" --out "$records" >/dev/null
}

keep_dir="$records/confirm_keep"
case $stage in
  plan | check)
    "$py" experiments/data/confirm_examples.py check --data "$data" --records "$records" >&2 || exit 2
    build_data
    check_stages
    "$py" experiments/claims/pack_confirm.py where >&2 ;;
  data) build_data; echo "$fresh" ;;
  all) run_stages pack_quietly ;;
  pack) "$py" experiments/claims/pack_confirm.py pack --root "$root" --out "$records" ;;
  drafts) [ -d "$root/base1/gsm8k_cot" ] || die "no $root/base1/gsm8k_cot: restore first"
          build_data; mode=run run_stage drafts ;;
  workers) workers experiments/claims/claims_confirm.sh "$root" "${@:2}" ;;
  stop) stop_workers "$root" ;;
  keep)
    mkdir -p "$keep_dir"
    dirs=()
    for b in base1 base6d; do [ -d "$root/$b" ] && dirs+=("$b"); done
    if [ ${#dirs[@]} -gt 0 ]; then
      tar czf "$keep_dir/baseline_raw.tar.gz" --sort=name --owner=0 --group=0 --mtime=@0 --exclude='.*.lock' \
          -C "$root" "${dirs[@]}"
    fi
    mapfile -t kept < <(cd "$root" && find . -path ./abandoned -prune -o -name .partial -type d -prune -printf '%h\n' | sort)
    files=()
    for p in "${kept[@]}"; do files+=("$p/.partial"); [ -f "$root/$p/.attempts.json" ] && files+=("$p/.attempts.json"); done
    if [ ${#files[@]} -eq 0 ]; then rm -f "$keep_dir/partial.tar.gz"; echo "no unfinished point" >&2
    else tar czf "$keep_dir/partial.tar.gz" --sort=name --owner=0 --group=0 --mtime=@0 -C "$root" "${files[@]}"; fi
    mapfile -t tasks < <([ -d "$cache_root" ] && cd "$cache_root" && find . -path '*/baselines/*.tasks' -type d -prune | sort)
    if [ ${#tasks[@]} -gt 0 ]; then  # under each kind's own cache folder, where restore puts them back
      tar czf "$keep_dir/baseline_tasks.tar.gz" --sort=name --owner=0 --group=0 --mtime=@0 -C "$cache_root" "${tasks[@]}"
    else rm -f "$keep_dir/baseline_tasks.tar.gz"; fi
    echo "kept -> $keep_dir (commit it with the records)" >&2 ;;
  restore)
    mkdir -p "$root" "$cache_root"
    [ -f "$keep_dir/baseline_raw.tar.gz" ] && tar xzf "$keep_dir/baseline_raw.tar.gz" -C "$root" --skip-old-files
    [ -f "$keep_dir/partial.tar.gz" ] && tar xzf "$keep_dir/partial.tar.gz" -C "$root" --skip-old-files
    [ -f "$keep_dir/baseline_tasks.tar.gz" ] && tar xzf "$keep_dir/baseline_tasks.tar.gz" -C "$cache_root" --skip-old-files
    build_data
    echo "restored under $root and $cache_root; next: bash experiments/claims/claims_confirm.sh drafts" >&2 ;;
  *) check_then_run "$stage"
     # the stage's finished points -> experiments/records/confirm/ (commit them as the stage finishes)
     pack_quietly
     log "done and packed into $records/confirm (commit it)" ;;
esac
