# Shared by experiments/studies/reproduce.sh and experiments/claims_1p5b.sh: sourced, not run.
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
