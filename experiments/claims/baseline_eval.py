"""Evaluate the unedited model once, one task at a time, with per-example records: the reference of every
study of the amended plan (ANALYSIS_PLAN.md, amendment of 2026-12-06) and the source of the drafts.

    python experiments/claims/baseline_eval.py --out DIR --task gsm8k_cot OVERRIDE... [--task race OVERRIDE...]

Each ``--task NAME`` starts a group of overrides for that task alone (``eval.limits.NAME=...`` and any
other ``eval.*`` key); the overrides before the first ``--task`` apply to every task (model, data,
cache). A task's records go to ``DIR/<task>/`` (``<task>.jsonl`` and the ``.complete.json`` marker) and
its metrics to ``DIR/<task>/metrics.json``. A task whose folder is complete is skipped, so the script
resumes where a cut run stopped; the workbench's cache (``cache_dir``) holds the unedited model's
answers for the drafts of later points; ``--seed-drafts`` puts a finished generation task's answers back
into a fresh cache from its records (no model pass; ``mathneuro.evaluation.decoding.draft_seed``). A
second process on the same ``DIR`` waits on the cache's baseline lock and then reads the first one's result.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from mathneuro.cli.run import config_dir, job_dirname, open_mapping_overrides
from mathneuro.evaluation.decoding.drafts import may_generate
from mathneuro.evaluation.samples import SAMPLES_COMPLETE
from mathneuro.models.devices import describe_hardware
from mathneuro.pipeline.config import ConfigError, register_configs, validate
from mathneuro.pipeline.workbench import get_workbench
from mathneuro.util.io import write_json_atomic


def split_groups(argv: list[str]) -> tuple[Path, list[str], list[tuple[str, list[str]]], bool]:
    """``(out, common overrides, [(task, its overrides), ...], seed drafts)`` from the command line."""
    out, common, groups, seed = None, [], [], False
    it = iter(argv)
    for arg in it:
        if arg == "--out":
            out = Path(next(it))
        elif arg == "--seed-drafts":
            seed = True
        elif arg == "--task":
            groups.append((next(it), []))
        elif groups:
            groups[-1][1].append(arg)
        else:
            common.append(arg)
    if out is None or not groups:
        raise ConfigError("usage: baseline_eval.py --out DIR [--seed-drafts] [OVERRIDE...] "
                          "--task NAME [OVERRIDE...] ...")
    return out, common, groups, seed


def main(argv: list[str]) -> int:
    try:
        out, common, groups, seed = split_groups(argv)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    register_configs()
    if not OmegaConf.has_resolver("mathneuro_dirname"):
        OmegaConf.register_new_resolver("mathneuro_dirname", job_dirname)
    configs = []
    with initialize_config_dir(config_dir=config_dir(), version_base="1.3"):
        for task, overrides in groups:  # every group composed and validated before the model loads
            try:
                cfg = OmegaConf.to_object(compose(config_name="config", overrides=open_mapping_overrides([
                    *common, f"eval.tasks=[{task}]", "eval.log_samples=true", *overrides])))
                validate(cfg)
            except Exception as exc:  # noqa: BLE001 - Hydra/OmegaConf composition errors: one line
                print(f"error: task {task}: {str(exc).splitlines()[0]}", file=sys.stderr)
                return 2
            configs.append((task, cfg))
    later = []
    for attempt, todo in enumerate((configs, later)):
        for task, cfg in list(todo):
            folder = out / task
            if (folder / SAMPLES_COMPLETE).exists() and (folder / "metrics.json").exists():
                print(f"{task}: done ({folder})", flush=True)
                if seed and may_generate(cfg.eval):
                    seed_task_drafts(get_workbench(cfg), task, cfg, folder)
                continue
            bench = get_workbench(cfg)
            if attempt == 0 and bench.baseline_running_elsewhere(cfg.eval, folder) is not None:
                print(f"{task}: being evaluated by another process; later", flush=True)
                later.append((task, cfg))  # the other tasks first, then wait for this one and read it
                continue
            evaluate_task(bench, task, cfg, folder)
    return 0


def seed_task_drafts(bench, task: str, cfg, folder: Path) -> None:
    """The drafts of a finished task, back in the cache from its records (a fresh machine or cache)."""
    counts = bench.seed_drafts(cfg.eval, folder)
    recorded = json.loads((folder / "metrics.json").read_text())["metrics"]
    for name, c in counts.items():
        pairs = {k: (v, next((r for rk, r in recorded.items() if rk.endswith(f"/{name}/{k}")), None))
                 for k, v in c.metrics.items() if not k.endswith("_stderr")}
        differ = sorted(k for k, (v, r) in pairs.items() if r is not None and r != v)
        same = sum(r is not None and r == v for v, r in pairs.values())
        print(f"{task}: drafts of {name} from its records: {c.answered} of {c.requests} requests answered, "
              f"{c.written} written, {c.present} already held; replayed metrics: {same} equal the recorded ones"
              + (f", {len(differ)} differ ({', '.join(differ)})" if differ else ""), flush=True)


def evaluate_task(bench, task: str, cfg, folder: Path) -> None:
    """The unedited model on one task: records and metrics under ``folder``."""
    metrics = bench.baseline(cfg.eval, folder)
    origin = bench.baseline_origin.get(bench.baseline_key(cfg.eval), {})  # who computed it (maybe read from the cache)
    write_json_atomic(folder / "metrics.json", {"task": task, "metrics": metrics, "model": bench.identity,
                                                "eval": dataclasses.asdict(cfg.eval),
                                                "hardware": origin.get("hardware") or describe_hardware(bench.model),
                                                **({"provenance": origin["provenance"]}
                                                   if "provenance" in origin else {})})
    print(f"{task}: {json.dumps(metrics, sort_keys=True)}", flush=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
