# Shared by experiments/reproduce.sh and experiments/claims_1p5b.sh: sourced, not run.
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
