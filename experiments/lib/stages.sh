# The stage runner of every study and claims script (experiments/claims/claims_*.sh, experiments/studies/reproduce.sh):
# sourced, not run.
# Expects the repository root as the working directory; the checkout's src/ comes first on the
# Python path, so a script runs this checkout's code whatever the venv has installed.
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
py=${PYTHON:-.venv/bin/python}

# die MESSAGE: one line on stderr, exit 2 (a setup error, before anything long starts)
die() { echo "error: $*" >&2; exit 2; }

# need_files DIR FILE...: every FILE (relative to DIR) exists, else die naming the first missing one
need_files() {
  local dir=$1 f; shift
  for f in "$@"; do [ -e "$dir/$f" ] || die "missing data file $dir/$f (DATA=$dir)"; done
}

# identification_sets DATA: the math records and the two filters of the paper, as override arrays
# (GSM8K train, RACE-high dev, MMLU validation; evaluation never reads these files)
identification_sets() {
  math=(task=gsm8k task.path="$1/gsm8k/train.jsonl")
  race=(filter=race filter.path="$1/race/validation_high.jsonl")
  mmlu=(filter=mmlu filter.path="$1/mmlu/validation_prerelease.jsonl")
}

# best_scalar DIR: the best intervention.scalar (4 decimals) of the Optuna sweep in DIR
best_scalar() {
  [ -f "$1/optimization_results.yaml" ] || die "no $1/optimization_results.yaml: run the scaling_search stage first"
  "$py" -c "import sys,yaml; print(round(yaml.safe_load(open(sys.argv[1]))['best_params']['intervention.scalar'], 4))" \
    "$1/optimization_results.yaml"
}

# start_workers SCRIPT ROOT N STAGE...: N one-thread background workers, each running SCRIPT's STAGEs in order
# (finished points are skipped, so workers share a stage), logs and process groups under ROOT/logs.
start_workers() {
  local script=$1 root=$2 n=$3; shift 3
  [[ $n =~ ^[1-9][0-9]*$ ]] || die "workers: N must be a positive number, got $n"
  mkdir -p "$root/logs"
  for i in $(seq 1 "$n"); do
    OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 setsid nohup nice -n 10 \
      bash -c 's=$1; shift; for st in "$@"; do bash "$s" "$st" || exit; done' worker "$script" "$@" \
      >> "$root/logs/worker-$i.log" 2>&1 < /dev/null &
    echo $! >> "$root/logs/workers.pid"
    echo "worker $i: pid $! (log $root/logs/worker-$i.log)" >&2
    if [ "$i" -lt "$n" ]; then sleep 20; fi  # the first claims its point before the next looks
  done
}

# stop_workers ROOT: stops the process groups start_workers left under ROOT/logs.
stop_workers() {
  local root=$1
  [ -f "$root/logs/workers.pid" ] || die "no workers started from $root"
  while read -r pid; do kill -TERM -- "-$pid" 2>/dev/null && echo "stopped worker group $pid" >&2 || true
  done < "$root/logs/workers.pid"
  rm -f "$root/logs/workers.pid"
}

# A runner sets STAGES (its stages, in order), `stage` (the command it was given) and a function `run_stage NAME`
# that runs one stage; `mode` is `check` (compose and validate every point, no model loads) or `run`.

# log MESSAGE: one line on stderr, stamped with the time and the runner's command
log() { echo "[$(date -u +%FT%TZ)] ${stage:-}: $*" >&2; }

# check_stage USAGE COMMAND...: $stage is one of STAGES, `all` or one of the runner's other COMMANDs, else die
check_stage() {
  local usage=$1; shift
  case " ${STAGES[*]} all $* " in *" $stage "*) ;; *) die "unknown stage: $stage ($usage)" ;; esac
}

# sweep OVERRIDE...: one multirun (mode=check: composed and validated by experiments/claims/check_points.py only)
sweep() {
  if [ "${mode:-run}" = check ]; then
    "$py" experiments/claims/check_points.py "$@" >/dev/null || exit 2
  else
    log "mathneuro -m $*"
    "$py" -m mathneuro -m "$@"
  fi
}

# check_stages: every stage of STAGES composed and validated, one line each
check_stages() {
  local s
  for s in "${STAGES[@]}"; do mode=check run_stage "$s"; echo "$s: every point is valid" >&2; done
}

# run_stages [COMMAND...]: every stage of STAGES validated first, then each run in order (COMMAND after each, if given)
run_stages() {
  local s
  for s in "${STAGES[@]}"; do mode=check run_stage "$s"; done
  for s in "${STAGES[@]}"; do
    mode=run run_stage "$s"
    if [ $# -gt 0 ]; then "$@"; fi
  done
}

# check_then_run NAME: stage NAME validated, then run
check_then_run() { mode=check run_stage "$1"; mode=run run_stage "$1"; }

# workers SCRIPT ROOT [N [STAGE...]]: N (2) background workers running SCRIPT's STAGEs (default `all`), each a
# stage of STAGES or `all` (checked here, before any starts)
workers() {
  local script=$1 root=$2 n=${3:-2} s
  local todo=("${@:4}")
  [ ${#todo[@]} -gt 0 ] || todo=(all)
  for s in "${todo[@]}"; do
    case " ${STAGES[*]} all " in *" $s "*) ;; *) die "workers: unknown stage $s (stages: ${STAGES[*]} all)" ;; esac
  done
  start_workers "$script" "$root" "$n" "${todo[@]}"
}
