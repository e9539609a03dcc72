"""Local lm-eval task YAMLs the tests write, as a user would: greedy generation tasks over JSON lines files, and a
user's zero-shot MATH-style task with its own scoring helper."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path


def generation_task(name: str, splits: Mapping[str, Path], *, doc_to_text: str, doc_to_target: str,
                    until: Sequence[str], max_gen_toks: int, num_fewshot: int | None = None,
                    process_results: str | None = None, metrics: Sequence[str] = ("exact_match",)) -> str:
    """The YAML of a greedy ``generate_until`` task ``name`` over JSON lines files (``splits``: split -> file; its
    ``test`` split evaluated, with ``num_fewshot`` the first exemplars of its ``train`` split), scored by
    ``process_results`` (``module.function``) or lm-eval's own ``metrics``, each a mean, higher better."""
    lines = [f"task: {name}", "dataset_path: json", "dataset_kwargs:", "  data_files:",
             *(f"    {split}: {path}" for split, path in splits.items()), "output_type: generate_until"]
    if num_fewshot:
        lines += ["training_split: train", "fewshot_split: train", "test_split: test", f"num_fewshot: {num_fewshot}",
                  "fewshot_config:", "  sampler: first_n"]
    else:
        lines += ["test_split: test"]
    lines += [f"doc_to_text: {json.dumps(doc_to_text)}", f"doc_to_target: {json.dumps(doc_to_target)}",
              "generation_kwargs:", f"  until: {json.dumps(list(until))}", "  do_sample: false",
              f"  max_gen_toks: {max_gen_toks}"]
    if process_results:
        lines += [f"process_results: !function {process_results}"]
    lines += ["metric_list:"]
    for metric in metrics:
        lines += [f"  - metric: {metric}", "    aggregation: mean", "    higher_is_better: true"]
    lines += ["metadata:", "  version: 1.0"]
    return "\n".join(lines) + "\n"


ZERO_SHOT_TASK = "my_zero_shot_math"
ZERO_SHOT_HELPERS = '''\
def process_results(doc, results):
    return {"exact_match": float(results[0].strip() == doc["answer"])}
'''


def write_zero_shot_task(root: Path) -> str:
    """A user's zero-shot MATH-style generation task (prompts of different lengths sharing only "Problem: ") in
    ``root/my_tasks``: its YAML and scoring helper; the folder's path."""
    folder = root / "my_tasks"
    folder.mkdir(parents=True)
    with (root / "problems.jsonl").open("w") as fh:
        for problem, answer in (("What is 3 + 4?", "7"), ("Half of twelve, then add nine, is what number?", "15"),
                                ("Simplify x + x.", "2x"), ("Find y if 2y = 10.", "5")):
            fh.write(json.dumps({"problem": problem, "answer": answer}) + "\n")
    (folder / f"{ZERO_SHOT_TASK}.yaml").write_text(generation_task(
        ZERO_SHOT_TASK, {"test": root / "problems.jsonl"}, doc_to_text="Problem: {{problem}}\nSolution:",
        doc_to_target="answer", until=["Problem:"], max_gen_toks=24,
        process_results="zero_shot_helpers.process_results"))
    (folder / "zero_shot_helpers.py").write_text(ZERO_SHOT_HELPERS)
    return str(folder)


def zero_shot_overrides(folder: str) -> tuple[str, ...]:
    """The overrides that evaluate only the zero-shot task in ``folder`` (:func:`write_zero_shot_task`), 4 problems."""
    return (f"eval.include_path={folder}", f"eval.tasks=[{ZERO_SHOT_TASK}]", f"eval.math_tasks=[{ZERO_SHOT_TASK}]",
            "eval.num_fewshot=null", "eval.limit=4")
