#!/usr/bin/env bash
# Issue 40: the claims under ANALYSIS_PLAN.md's amendment of 2026-12-06 (about 25 CPU-hours at one thread), on
# Qwen2.5-Coder-1.5B-Instruct in bf16. Stages in the plan's priority order; each is resumable per point (a Hydra
# multirun skips finished points; a second worker running the same stage takes the points the first is not running):
#   bash experiments/claims/claims_amended.sh STAGE          (STAGE: one of the list below, or `all` for every stage in order)
#   base1     the unedited model on claim 1's tasks, one task at a time, undrafted: GSM8K 300, MMLU 20 per subject
#             (1,140), RACE-high 300 articles                                        -> $ROOT/baseline/<task>
#   claim1    pruning at K = 15 %, MMLU filter: mathneuro and random (M's per-matrix counts), draws 0-2; GSM8K first 200
#             (drafted from the unedited model's answers), MMLU 1,140, RACE 300; saves the selections (claim 5's N = 100)
#                                                                                    -> $ROOT/claim1
#   claim45   identification only (eval=none, selections saved): RACE filter N = 100 draws 0-2 (claim 4); MMLU filter
#             N = 1, 10 and 100, draws 0-2 (claim 5; N = 100 is claim 1's selection, computed again so that claim 5
#             stands without claim 1's run dirs)                                    -> $ROOT/claim4, $ROOT/claim5
#   base2     (nothing: claim 2's tasks are prefixes of base1's)
#   claim2    Wanda at K = 15 %, draws 0-1 (filter mmlu is recorded, Wanda does not use it); GSM8K 100 drafted, MMLU 10
#             per subject (570), RACE 150                                             -> $ROOT/claim2
#   base6     the unedited model on the generalisation tasks: MATH (minerva_math) 22 per subject (154), EGSM 100, MathQA
#             1,000, PIQA 1,000, WinoGrande 1,000, HellaSwag 500, MuTual 500, WikiText-2 15 articles (2048-token windows,
#             batch 1)                                                               -> $ROOT/baseline/<task>
#   claim6    pruning at K = 15 %, MMLU filter, mathneuro and random, draws 0-1 (claim 1's selections): MATH 15 per subject
#             (105) and EGSM 100 drafted, MathQA 1,000, PIQA 1,000, WinoGrande 1,000, HellaSwag 500, MuTual 500; then
#             WikiText 15 articles in a multirun of its own                          -> $ROOT/claim6/{tasks,wikitext}
#   claim3    scaling K = 5 %, s = 1.1, MMLU filter, mathneuro, draws 0-1, every task undrafted (bf16 drafting flips
#             near-ties): GSM8K 300, MATH 154, MMLU 1,140, RACE 300                 -> $ROOT/claim3
#             each point pairs with an unedited evaluation made on its own kind of CPU (amendment of 2026-12-07):
#             where $ROOT/baseline's tasks were made on another, this machine's own is made first, undrafted, in a
#             cache of its own                                                       -> $ROOT/baseline_cpu/<machine>
#             (a second worker skips the tasks the first is making and starts the points)
#   Claims 1-6 run one multirun per draw over the methods whose point has no packed record under experiments/records
#   yet (RECORDS; claim 5: its packed table), so a sitting on a fresh machine does not rerun a committed point.
#   drafts    a fresh machine or cache: the unedited model's answers to GSM8K, MATH and EGSM back into the cache as the
#             drafts of later points, from the records under $ROOT/baseline (restore them from
#             experiments/records/amended_baseline_raw first); no model pass
#   keep      before a sitting ends: the finished tasks and generated batches of every unfinished point (their .partial
#             folders) -> experiments/records/amended_partial/partial.tar.gz, and those of unedited evaluations in
#             progress (the caches' baselines/*.tasks) -> amended_partial/baseline_tasks.tar.gz, to commit
#   restore   a sitting on a fresh machine, first: the unedited model's raw records and the kept partial points back
#             under $ROOT (a resumed point evaluates only its unfinished tasks), then `drafts`
#   pack      (pack --no-table: claim 5's table as it is) pack every finished point and the baseline into experiments/records/amended_<claim>/ (then: make claims)
#   check     compose and validate every point of every stage (no model loads)
#   workers [N [STAGE...]] N (2) background workers, one thread each, every one running the stages (default `all`)
#             in order; finished points and tasks, and points packed under experiments/records, are skipped; two
#             on one stage split its points and claim 3's baseline tasks. Logs and process groups: $ROOT/logs/.
#             They run this checkout: edit another one (a git worktree) meanwhile
#   stop      end the workers started by `workers` (before: `pack --no-table` and `keep`, then commit)
# Environment (defaults): MODEL (qwen2_5_coder_1_5b) MODELS (/root/.cache/mathneuro-models) DATA (../shared/data)
#   ROOT (/work/exp-outputs/claims_amended: run dirs, never committed) CACHE (/work/exp-cache/amended) DTYPE (bfloat16)
#   OMP_NUM_THREADS=1 per worker (two workers: two shells running the same stage list).
set -euo pipefail
shopt -s inherit_errexit
cd "$(dirname "$0")/../.."
source experiments/lib/stages.sh
STAGES=(base1 claim1 claim45 claim2 base6 claim6 claim3)
usage="usage: claims_amended.sh STAGE   (STAGE: ${STAGES[*]} all restore drafts keep pack check workers stop)"
stage=${1:?$usage}
check_stage "$usage" restore drafts keep pack check workers stop

model=${MODEL:-qwen2_5_coder_1_5b}
models=${MODELS:-/root/.cache/mathneuro-models}
weights="$models/qwen2.5-coder-1.5b/model.gguf"
root=${ROOT:-/work/exp-outputs/claims_amended}
cache=${CACHE:-/work/exp-cache/amended}
DTYPE=${DTYPE:-bfloat16}
[ -d "${DATA:-../shared/data}" ] || die "no data folder ${DATA:-../shared/data} (set DATA=<the shared data folder>)"
data=$(cd "${DATA:-../shared/data}" && pwd)
need_files "$data" gsm8k/train.jsonl gsm8k/test.jsonl race/validation_high.jsonl race/test_high_by_article.jsonl \
  mmlu/validation_prerelease.jsonl math/test.jsonl mathqa/test_1000.jsonl egsm/egsm_full.jsonl \
  hellaswag/validation.jsonl piqa/validation.jsonl winogrande/validation.jsonl wikitext2/test.jsonl mutual/validation.jsonl
case $stage in pack | check | keep | stop) ;; *) [ -f "$weights" ] ;; esac || die "no model at $weights; fetch it with:
  bash ../shared/models/fetch-models.sh $models qwen2.5-coder-1.5b"
case $root in "$PWD"/* | [!/]*) die "ROOT=$root lies inside the repository: run dirs stay outside it" ;; esac
identification_sets "$data"

common=(model="$model" model.name_or_path="$weights" model.dtype="$DTYPE" model.device=auto "${math[@]}"
        max_length=512 batch_size=8 num_samples=100 eval.data_dir="$data" eval.batch_size=8 eval.log_samples=true
        progress=false cache_dir="$cache")
# every point is paired with the one unedited evaluation under $root/baseline (base1, base6): no per-stage baseline
points=("${common[@]}" eval.baseline=false)
c1_eval=(eval=paper 'eval.tasks=[gsm8k_cot,race,mmlu]' eval.limits.gsm8k_cot=200 eval.limits.race=300 eval.limits.mmlu=20)
c2_eval=(eval=paper 'eval.tasks=[gsm8k_cot,race,mmlu]' eval.limits.gsm8k_cot=100 eval.limits.race=150 eval.limits.mmlu=10)
c3_eval=(eval=paper 'eval.tasks=[gsm8k_cot,minerva_math,race,mmlu]' eval.limits.gsm8k_cot=300 eval.limits.minerva_math=22
         eval.limits.race=300 eval.limits.mmlu=20 eval.draft=none)
c6_eval=(eval=generalisation 'eval.tasks=[minerva_math,egsm,mathqa,piqa,winogrande,hellaswag,mutual]'
         eval.limits.minerva_math=15 eval.limits.egsm=100 eval.limits.mathqa=1000 eval.limits.piqa=1000
         eval.limits.winogrande=1000 eval.limits.hellaswag=500 eval.limits.mutual=500)
ppl_eval=(eval=generalisation 'eval.tasks=[wikitext]' eval.limits.wikitext=15 eval.batch_size=1 eval.max_length=2048)

records=${RECORDS:-experiments/records}
# unpacked STUDY FILTER SEED TASK METHOD...: the methods without a packed point in $records/STUDY at that filter and
# seed whose records hold TASK (- for any: identification), comma-joined; a fresh machine restores no run dir, so
# a packed point is not rerun (its header says which tasks it holds: claim 6's WikiText points pack apart)
unpacked() {
  "$py" experiments/claims/pack_amended.py --out "$records" --unpacked "$@"
}

# sweep_seeds STUDY FILTER TASK "SEEDS" "METHODS" OVERRIDE...: one multirun per seed over the methods not yet packed
sweep_seeds() {
  local study=$1 filter=$2 task=$3 seed methods
  for seed in $4; do
    methods=$(unpacked "$study" "$filter" "$seed" "$task" $5)
    if [ -z "$methods" ] && [ "$mode" != check ]; then
      log "seed $seed: every point packed in $records/$study ($task), skipped"
      continue
    fi
    sweep "${@:6}" seed="$seed" method="${methods:-${5// /,}}"
  done
}

baseline() {  # baseline [--task NAME OVERRIDE...]...: the unedited model, one task at a time
  [ "$mode" = check ] && return 0
  log "baseline_eval.py $*"
  "$py" experiments/claims/baseline_eval.py --out "${out:-$root/baseline}" "${common[@]}" "$@"
}

# own_baseline: claim 3's tasks on this kind of CPU, where $root/baseline made them on another (bf16 answers at
# near-ties depend on the CPU's kernels); its own cache, so that the drafts of other stages stay the baseline's.
# Each task holds <dir>/.<task>.lock while it runs: a second worker skips the tasks the first is making and goes
# on to the next, then to the points (which need the baseline only when packed), instead of waiting on the
# cache's baseline lock. The longest tasks come first so two workers split them.
own_baseline() {
  [ "$mode" = check ] && return 0
  local dir spec task
  dir=$("$py" experiments/claims/pack_amended.py --root "$root" --out "$records" --own-baseline-dir gsm8k_cot minerva_math mmlu race)
  if [ -z "$dir" ]; then
    log "\$root/baseline made claim 3's tasks on this kind of CPU"
    return 0
  fi
  mkdir -p "$dir"
  local common=("${common[@]/#cache_dir=*/cache_dir=$cache/$(basename "$dir")}")
  for spec in "gsm8k_cot eval=paper eval.limits.gsm8k_cot=300" "minerva_math eval=generalisation eval.limits.minerva_math=22" \
              "mmlu eval=paper eval.limits.mmlu=20" "race eval=paper eval.limits.race=300"; do
    task=${spec%% *}
    (
      if ! flock -n 9; then
        log "$task of $dir is being made by another worker; skipped here"
        exit 0
      fi
      out=$dir baseline --task $spec
    ) 9>"$dir/.$task.lock" || exit $?
  done
}

run_stage() {
  case $1 in
    base1) baseline --task gsm8k_cot eval=paper eval.limits.gsm8k_cot=300 --task mmlu eval=paper eval.limits.mmlu=20 \
                    --task race eval=paper eval.limits.race=300 ;;
    drafts) baseline --seed-drafts --task gsm8k_cot eval=paper eval.limits.gsm8k_cot=300 \
                    --task minerva_math eval=generalisation eval.limits.minerva_math=22 \
                    --task egsm eval=generalisation eval.limits.egsm=100 ;;
    claim1) sweep_seeds prune mmlu gsm8k_cot "0 1 2" "mathneuro random" "${points[@]}" "${mmlu[@]}" "${c1_eval[@]}" top_k=0.15 \
                  save_selection=true hydra.sweep.dir="$root/claim1" ;;
    claim45)
      sweep_seeds identification race - "0 1 2" mathneuro "${common[@]}" "${race[@]}" eval=none top_k=0.15 \
            save_selection=true hydra.sweep.dir="$root/claim4"
      if [ -f "$records/data_efficiency/amended_mmlu.jsonl.gz" ] && [ "$mode" != check ]; then
        log "claim 5's table is packed ($records/data_efficiency/amended_mmlu), skipped"
      else
        sweep "${common[@]}" "${mmlu[@]}" eval=none top_k=0.15 seed=0,1,2 num_samples=1,10,100 method=mathneuro \
              save_selection=true hydra.sweep.dir="$root/claim5"
      fi ;;
    claim2) sweep_seeds prune mmlu gsm8k_cot "0 1" wanda "${points[@]}" "${mmlu[@]}" "${c2_eval[@]}" top_k=0.15 hydra.sweep.dir="$root/claim2" ;;
    base6) baseline --task minerva_math eval=generalisation eval.limits.minerva_math=22 \
                    --task egsm eval=generalisation eval.limits.egsm=100 --task mathqa eval=generalisation eval.limits.mathqa=1000 \
                    --task piqa eval=generalisation eval.limits.piqa=1000 \
                    --task winogrande eval=generalisation eval.limits.winogrande=1000 \
                    --task hellaswag eval=generalisation eval.limits.hellaswag=500 \
                    --task mutual eval=generalisation eval.limits.mutual=500 \
                    --task wikitext eval=generalisation eval.limits.wikitext=15 eval.batch_size=1 eval.max_length=2048 ;;
    claim6)
      sweep_seeds generalisation mmlu minerva_math "0 1" "mathneuro random" "${points[@]}" "${mmlu[@]}" "${c6_eval[@]}" \
            top_k=0.15 hydra.sweep.dir="$root/claim6/tasks"
      sweep_seeds generalisation mmlu wikitext "0 1" "mathneuro random" "${points[@]}" "${mmlu[@]}" "${ppl_eval[@]}" \
            top_k=0.15 hydra.sweep.dir="$root/claim6/wikitext" ;;
    claim3) own_baseline
            sweep_seeds scale mmlu gsm8k_cot "0 1" mathneuro "${points[@]}" "${mmlu[@]}" "${c3_eval[@]}" intervention=scale top_k=0.05 \
                  intervention.scalar=1.1 hydra.sweep.dir="$root/claim3" ;;
  esac
}

case $stage in
  check) check_stages ;;
  all) run_stages ;;
  pack) "$py" experiments/claims/pack_amended.py --root "$root" "${@:2}" ;;
  workers) workers experiments/claims/claims_amended.sh "$root" "${@:2}" ;;
  stop) stop_workers "$root" ;;
  keep)
    mkdir -p "$records/amended_partial"
    mapfile -t kept < <(cd "$root" && find . -name .partial -type d -prune -printf '%h\n' | sort)
    files=()
    for p in "${kept[@]}"; do files+=("$p/.partial"); [ -f "$root/$p/.attempts.json" ] && files+=("$p/.attempts.json"); done
    if [ -d "$root/baseline_cpu" ]; then  # claim 3's machines' own unedited evaluations (restore puts them back)
      tar czf "$records/amended_baseline_raw/baseline_cpu.tar.gz" --sort=name --owner=0 --group=0 --mtime=@0 \
          --exclude='.*.lock' -C "$root" baseline_cpu
      echo "kept $root/baseline_cpu -> $records/amended_baseline_raw/baseline_cpu.tar.gz" >&2
    fi
    # unedited evaluations in progress (claim 3's own baseline): their finished tasks and generated batches, in the caches
    mapfile -t tasks < <([ -d "$cache" ] && cd "$cache" && find . -path '*/baselines/*.tasks' -type d -prune | sort)
    if [ ${#tasks[@]} -gt 0 ]; then
      tar czf "$records/amended_partial/baseline_tasks.tar.gz" --sort=name --owner=0 --group=0 --mtime=@0 \
          -C "$cache" "${tasks[@]}"
      echo "kept ${#tasks[@]} unedited evaluation(s) in progress -> $records/amended_partial/baseline_tasks.tar.gz" >&2
    else
      rm -f "$records/amended_partial/baseline_tasks.tar.gz"
    fi
    if [ ${#files[@]} -eq 0 ]; then rm -f "$records/amended_partial/partial.tar.gz"; echo "no unfinished point" >&2
    else
      tar czf "$records/amended_partial/partial.tar.gz" --sort=name --owner=0 --group=0 --mtime=@0 -C "$root" "${files[@]}"
      echo "kept ${#kept[@]} unfinished point(s) -> $records/amended_partial/partial.tar.gz" >&2
    fi ;;
  restore)
    mkdir -p "$root"
    for t in experiments/records/amended_baseline_raw/*.tar.gz; do tar xzf "$t" -C "$root" --skip-old-files; done
    if [ -f "$records/amended_partial/baseline_tasks.tar.gz" ]; then  # unedited evaluations in progress
      mkdir -p "$cache" && tar xzf "$records/amended_partial/baseline_tasks.tar.gz" -C "$cache" --skip-old-files
    fi
    if [ -f "$records/amended_partial/partial.tar.gz" ]; then
      tar xzf "$records/amended_partial/partial.tar.gz" -C "$root" --skip-old-files
      # a kept point resumes only on the kind of CPU that began it (bf16 rounds differently elsewhere): say so now
      "$py" - "$root" <<'PY'
import json, sys
from pathlib import Path
from mathneuro.models.devices import cpu_hardware, machine_kind
here = machine_kind(cpu_hardware())
for parts in sorted(Path(sys.argv[1]).glob("**/.partial/edited-*/key.parts")):
    tasks = [p.stem.rsplit("-", 1)[0] for p in parts.parent.glob("*.json")]
    there = machine_kind(json.loads(parts.read_text()).get("hardware"))
    if tasks and there != here:
        print(f"kept point {parts.parents[2].name[-10:]} ({', '.join(sorted(tasks))}) was begun on {there}; this is "
              f"{here}: its selection will differ, so those tasks run again", file=sys.stderr)
PY
    fi
    mode=run run_stage drafts ;;
  *) check_then_run "$stage" ;;
esac
