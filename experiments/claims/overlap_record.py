"""Write claim 5's per-matrix overlap records from finished identifications (ANALYSIS_PLAN.md §5.5).

    .venv/bin/python experiments/claims/overlap_record.py RUN_DIR RUN_DIR [RUN_DIR ...] [--out experiments/records]
    .venv/bin/python experiments/claims/overlap_record.py RUN_DIR ... --from-statistics [--cache DIR]  # none saved

Each RUN_DIR is a finished point (its ``results.json``). For every pair of runs of one model, task, filter,
K, method and N with different seeds, one ``overlap`` record per set is written into
``<out>/data_efficiency/`` (:mod:`claimslib.overlap_records`): M (``selection.safetensors``) and the
math top-K set (``selection_topk.safetensors``) where both runs saved it. With ``--from-statistics`` the sets
are recomputed instead from the statistics cache (the keys in ``results.json``) and the model's weights in
the run's dtype, as ``dtype_selection_overlap.py`` does, for runs that did not save their selections.
``experiments/claims/claims.py`` rebuilds claim 5 from these records.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from claimslib.overlap_records import saved_sets, write_pairs

HERE = Path(__file__).resolve().parent


def _run(folder: Path) -> dict:
    path = folder / "results.json"
    if not path.is_file():
        raise SystemExit(f"{folder}: no results.json (not a finished point)")
    result = json.loads(path.read_text())
    result["_dir"] = folder
    return result


_WEIGHTS: dict[str, dict] = {}  # model path -> its target weights (float32), loaded once


def statistics_sets(result: dict, cache: str | None) -> dict[str, Any]:
    """M and the math top-K set recomputed from the cached statistics and the model's weights (rounded to the
    run's dtype), as ``dtype_selection_overlap.py`` does."""
    sys.path.insert(0, str(HERE.parent / "benchmarks"))
    from dtype_selection_overlap import (  # experiments/benchmarks/dtype_selection_overlap.py
        point_inputs,
        selections,
    )

    from mathneuro.models import load_model
    from mathneuro.models.embedded import cache_root
    from mathneuro.models.targets import find_target_linears, weight_parameters
    from mathneuro.statistics.cache import StatisticsCache

    inputs = point_inputs(Path(result["_dir"]), StatisticsCache(cache_root(cache) / "statistics"))
    if inputs["model"] not in _WEIGHTS:
        model, _ = load_model(inputs["model"], dtype="float32", device="cpu")
        _WEIGHTS[inputs["model"]] = {n: w.detach() for n, w in weight_parameters(find_target_linears(model)).items()}
    m, top = selections(_WEIGHTS[inputs["model"]], inputs, float(result["point"]["top_k"]))
    return {"M": m, "topk": top}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", type=Path, help="finished points (run dirs with results.json)")
    parser.add_argument("--out", type=Path, default=HERE.parent / "records", help="records root (default: %(default)s)")
    parser.add_argument("--from-statistics", action="store_true",
                        help="recompute the sets from the statistics cache instead of saved selections")
    parser.add_argument("--cache", default=None, help="the mathneuro cache folder (default: mathneuro's)")
    args = parser.parse_args(argv)
    results = [_run(folder) for folder in args.runs]
    sets_of = (lambda r: statistics_sets(r, args.cache)) if args.from_statistics else saved_sets
    written = write_pairs(results, args.out / "data_efficiency", sets_of)
    for path in written:
        print(f"wrote {path}")
    if not written:
        print("no pair of runs of one point with different seeds and saved sets", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
