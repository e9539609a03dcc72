"""``bench_eval.py --draft``: drafted greedy decoding against today's prefix-cache path, per edit.

One process, one loaded model. M is identified with MathNeuro (``--identify-samples`` GSM8K train
samples for the task, as many of ``--filter-path`` for the filter; selections are saved under
``--cache-dir`` and reused, also by the other dtype). Then:

1. the unedited model answers the ``--limit`` questions through the prefix-cache path; its tokens are
   recorded into an in-memory draft store (the baseline's drafts, as the runner records them); with
   ``--lookup`` (the default) chunk by chunk against ``lookup``, the unedited model decoding by prompt
   lookup (``eval.prompt_lookup=on``: lookup in the prompt and the row's own tokens);
2. for each edit of ``--edits`` the two paths run on the same questions, ``--chunk`` questions per
   lm-eval call, alternating which path goes first chunk by chunk, so that a busy, shared machine
   slows both alike: ``undrafted`` (``eval.draft=none``) and ``drafted`` (from the baseline's drafts).

Reported per edit: wall and CPU seconds of each path and their ratios, model passes of the greedy
loops (the pass ratio: about the gain where a pass costs the same for 1 or 100 tokens, as on a GPU),
tokens drafted and accepted per question, generated texts identical, scored answers agreeing (per
lm-eval filter), both paths' scores; and, simulated from the token sequences (one row at a time),
the passes drafting would need from the baseline's answers and from the other scaled point's answers
(whether drafting from the nearest evaluated point of the same selection would pay).

``--task math_zeroshot``: a zero-shot task as a user would write it (a YAML in an ``eval.include_path``
folder written to a temporary directory): MATH test problems read from ``<data-dir>/math/test.jsonl``
by path, prompt "Problem: <problem>\nSolution:", greedy, ``max_gen_toks`` 96, stop at "Problem:",
scored by the last ``\boxed{}`` against the solution's (``math_answers_equal``). With
``--noise-batch B`` each edit also runs undrafted in batches of ``B``: how often two undrafted runs
that batch differently agree (in bf16 a greedy path parts at near-ties whenever the arithmetic changes).

    nohup nice -n 10 .venv/bin/python experiments/benchmarks/bench_eval.py --draft --limit 56 --dtype bfloat16 \\
        --out experiments/results/bench_eval/draft_qwen0.5b_bf16.json > draft.log 2>&1 &
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path

import lm_eval
import torch
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from mathneuro.cli.run import config_dir
from mathneuro.edit.undoable import apply_intervention
from mathneuro.evaluation import EvalConfig
from mathneuro.evaluation.decoding.draft_lookup import DraftPlanner, RowDraft
from mathneuro.evaluation.decoding.drafted import token_cost
from mathneuro.evaluation.decoding.drafts import DraftStore, attach_draft_store
from mathneuro.evaluation.harness import Harness, preserved_rng
from mathneuro.methods.selection import Selection
from mathneuro.pipeline.config import register_configs
from mathneuro.pipeline.workbench import get_workbench, prepare_samples

PATHS = ("undrafted", "drafted")
ZERO_SHOT_TASK = "math_zeroshot"  # written by zero_shot_task(); not in mathneuro's task table
ZERO_SHOT_YAML = """\
task: math_zeroshot
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}
output_type: generate_until
test_split: test
doc_to_text: "Problem: {{{{problem}}}}\\nSolution:"
doc_to_target: solution
generation_kwargs:
  until: ["Problem:"]
  do_sample: false
  max_gen_toks: 96
process_results: !function math_zeroshot_scoring.process_results
metric_list:
  - metric: exact_match
    aggregation: mean
    higher_is_better: true
metadata:
  version: 1.0
"""
ZERO_SHOT_SCORING = '''\
from mathneuro.evaluation.math_equivalence import last_boxed, math_answers_equal


def process_results(doc, results):
    answer, gold = last_boxed(results[0]), last_boxed(doc["solution"])
    return {"exact_match": float(answer is not None and gold is not None and math_answers_equal(answer, gold))}
'''


def zero_shot_task(data_dir: str) -> str:
    """A folder (temporary, outside the repository) holding the zero-shot MATH task's YAML and scoring."""
    data = Path(data_dir).resolve() / "math" / "test.jsonl"
    if not data.exists():
        raise SystemExit(f"--task {ZERO_SHOT_TASK}: no MATH test file at {data}")
    folder = Path(tempfile.mkdtemp(prefix="bench_math_zeroshot_"))
    (folder / "math_zeroshot.yaml").write_text(ZERO_SHOT_YAML.format(data=data))
    (folder / "math_zeroshot_scoring.py").write_text(ZERO_SHOT_SCORING)
    return str(folder)


def parse_edits(text: str) -> list[dict]:
    """``scale:0.05:1.1,prune:0.15`` -> [{name, intervention, top_k, scalar}, ...]."""
    edits = []
    for item in filter(None, text.split(",")):
        parts = item.split(":")
        kind, top_k = parts[0], float(parts[1])
        scalar = 0.0 if kind == "prune" else float(parts[2])
        edits.append({"name": f"{kind} K={top_k:g}" + (f" s={scalar:g}" if kind != "prune" else ""),
                      "intervention": kind, "top_k": top_k, "scalar": scalar})
    return edits


def workbench_and_selections(args, edits: list[dict]):
    """The loaded model (through the runner's workbench) and the MathNeuro selection of each top-K."""
    filter_path = args.filter_path or str(Path(args.data_dir) / "mmlu" / "validation_prerelease.jsonl")
    overrides = [f"model.name_or_path={args.model}", f"model.dtype={args.dtype}", f"model.device={args.device}",
                 "model.name=bench", "task=gsm8k", f"task.path={Path(args.data_dir) / 'gsm8k' / 'train.jsonl'}",
                 "filter=mmlu", f"filter.path={filter_path}", f"num_samples={args.identify_samples}",
                 f"cache_dir={args.cache_dir}", "progress=false", "logger=none", "eval=none"]
    register_configs()
    with initialize_config_dir(config_dir=config_dir(), version_base="1.3"):
        cfg = OmegaConf.to_object(compose(config_name="config", overrides=overrides))
    bench = get_workbench(cfg)
    selections: dict[float, Selection] = {}
    folder = Path(args.cache_dir) / "selections"
    for top_k in sorted({e["top_k"] for e in edits}):
        path = folder / f"{Path(args.model).parent.name}_mathneuro_k{top_k:g}_n{args.identify_samples}.safetensors"
        if path.exists():
            selections[top_k] = Selection.load(path)
            continue
        start = time.perf_counter()
        task = prepare_samples(cfg.task, "task", cfg.num_samples, 0, cfg.bootstrap)
        filters = [prepare_samples(cfg.filter, "filter", cfg.num_samples, 1, cfg.bootstrap)]
        selections[top_k], _ = bench.select(cfg.method, task, filters, top_k=top_k, seed=0,
                                            max_length=cfg.max_length, batch_size=cfg.batch_size, progress=False)
        path.parent.mkdir(parents=True, exist_ok=True)
        selections[top_k].save(path)
        print(f"identified M at K={top_k:g} in {time.perf_counter() - start:.0f} s -> {path}", flush=True)
    return bench, selections


def harnesses(bench, args) -> dict[str, Harness]:
    """One harness per path: undrafted (today: no drafts, no lookup), drafted (from the baseline's answers),
    lookup (prompt lookup alone), batched (undrafted, in lm-eval's batches: no continuous batching),
    rebatched (undrafted in batches of --noise-batch). --continuous sets the greedy loop's continuous
    batching on the others."""
    out = {}
    paths = [("undrafted", "none", "off", args.batch_size), ("drafted", "baseline", "auto", args.batch_size),
             ("lookup", "none", "on", args.batch_size), ("today", "none", "off", args.batch_size),
             ("batched", "none", "off", args.batch_size)]
    if args.noise_batch:
        paths.append(("rebatched", "none", "off", args.noise_batch))
    user = {}
    if args.task == ZERO_SHOT_TASK:
        user = {"include_path": zero_shot_task(args.data_dir), "math_tasks": [ZERO_SHOT_TASK], "num_fewshot": 0}
    for path, draft, lookup, batch_size in paths:
        cfg = EvalConfig(name=path, tasks=[args.task], data_dir=args.data_dir, batch_size=batch_size,
                         max_gen_toks=args.max_gen_toks, bootstrap_iters=0, draft=draft, draft_tokens=args.draft_tokens,
                         prompt_lookup=lookup, prefix_cache=path != "today",
                         continuous_batching="off" if path == "batched" else args.continuous, **user)
        cfg.validate()
        out[path] = Harness(bench.model, bench.tokenizer, cfg, cfg.resolved_data_dir())
    return out


def run_chunk(harness: Harness, task: str, ids: list[int], args) -> dict:
    """One lm-eval call on questions ``ids``: seconds, CPU seconds, prefix stats and per-question records."""
    name = harness.lm_eval_name(task)
    objs = harness.built_task(task)
    gen_kwargs = {"max_gen_toks": args.max_gen_toks} if args.max_gen_toks else None
    start, cpu = time.perf_counter(), time.process_time()
    with preserved_rng():
        results = lm_eval.simple_evaluate(model=harness.lm, tasks=list(objs), task_manager=harness.task_manager,
                                          samples={name: ids}, bootstrap_iters=0, log_samples=True,
                                          gen_kwargs=gen_kwargs, fewshot_random_seed=harness.cfg.fewshot_seed)
    seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu
    records: dict[int, dict] = {}
    for sample in results["samples"][name]:
        rec = records.setdefault(int(sample["doc_id"]), {"text": sample["resps"][0][0], "answers": {}, "correct": {}})
        rec["answers"][sample["filter"]] = str(sample["filtered_resps"][0])
        rec["correct"][sample["filter"]] = float(sample.get("exact_match", 0.0))
    stats = getattr(harness.lm, "prefix_stats", None)  # prefix_cache off (HFLM's own code): all zero
    return {"seconds": seconds, "cpu_seconds": cpu_seconds, "stats": dict(vars(stats)) if stats is not None else {},
            "records": records}


def run_paths(harnesses_: dict[str, Harness], stores: dict[str, DraftStore], task: str, chunks: list[list[int]],
              args, order: tuple[str, ...] = PATHS) -> dict[str, dict]:
    """Every chunk through each path of ``order`` (alternating which goes first); totals and records per path."""
    model = harnesses_[order[0]].model
    runs = {p: {"seconds": 0.0, "cpu_seconds": 0.0, "stats": {}, "records": {}} for p in order}
    for i, chunk in enumerate(chunks):
        for path in order if i % 2 == 0 else tuple(reversed(order)):
            attach_draft_store(model, stores[path])
            with stores[path].recording() if path != "drafted" else _nothing():
                r = run_chunk(harnesses_[path], task, chunk, args)
            run = runs[path]
            run["seconds"] += r["seconds"]
            run["cpu_seconds"] += r["cpu_seconds"]
            for k, v in r["stats"].items():
                run["stats"][k] = run["stats"].get(k, 0) + v
            run["records"].update(r["records"])
        done = sum(len(c) for c in chunks[:i + 1])
        print(f"  {done} questions: " + ", ".join(f"{p} {runs[p]['seconds']:.0f} s" for p in order), flush=True)
    attach_draft_store(model, None)
    return runs


class _nothing:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


def simulated_passes(answer: list[int], draft: list[int] | None, cost: float, fixed: int | None) -> int:
    """Passes drafted decoding needs for one row whose greedy answer is ``answer``, drafting from ``draft``."""
    planner = DraftPlanner(cost, fixed, max_pass_tokens=4096)
    row = RowDraft(draft) if draft else None
    done, passes = [], 0
    while len(done) < len(answer):
        k = 0
        if row is not None:
            k = planner.plan([(row.kind, min(row.available(), len(answer) - len(done) - 1))], 1, 1 << 30)[0]
        proposal = row.proposal(k) if row is not None else []
        m = 0
        while m < len(proposal) and proposal[m] == answer[len(done) + m]:
            m += 1
        done.extend(answer[len(done):len(done) + m + 1])
        passes += 1
        if row is not None:
            planner.observe(row.kind, len(proposal), m)
            if len(done) < len(answer):
                row.advance(done, len(proposal), m)
    return passes


def compare(edit: dict, runs: dict[str, dict], n: int, other: str = "drafted", base: str = "undrafted") -> dict:
    """The ``base`` path (undrafted, or today's for the unedited model) against ``other`` (drafted, or lookup)."""
    u, d = runs[base], runs[other]
    ids = sorted(u["records"])
    filters = sorted(u["records"][ids[0]]["answers"])
    su, sd = {"greedy_passes": 0, **u["stats"]}, d["stats"]
    return {
        "edit": edit["name"], "questions": n,
        "undrafted_s": u["seconds"], "drafted_s": d["seconds"], "undrafted_cpu_s": u["cpu_seconds"],
        "drafted_cpu_s": d["cpu_seconds"], "speedup": u["seconds"] / d["seconds"],
        "cpu_speedup": u["cpu_seconds"] / d["cpu_seconds"],
        "undrafted_passes": su["greedy_passes"], "drafted_passes": sd["greedy_passes"],
        "pass_ratio": su["greedy_passes"] / max(sd["greedy_passes"], 1),
        "drafted_per_question": sd["tokens_drafted"] / n, "accepted_per_question": sd["tokens_accepted"] / n,
        "same_text": sum(u["records"][i]["text"] == d["records"][i]["text"] for i in ids),
        "text_differs": [i for i in ids if u["records"][i]["text"] != d["records"][i]["text"]],
        "same_answer": {f: sum(u["records"][i]["answers"][f] == d["records"][i]["answers"][f] for i in ids)
                        for f in filters},
        "score": {"undrafted" if p == base else "drafted" if p == other else p:
                  {f: sum(r["records"][i]["correct"][f] for i in ids) / n for f in filters} for p, r in runs.items()},
    } | ({"rebatched_same_text": sum(u["records"][i]["text"] == runs["rebatched"]["records"][i]["text"] for i in ids),
          "rebatched_same_answer": {f: sum(u["records"][i]["answers"][f]
                                           == runs["rebatched"]["records"][i]["answers"][f]
                                           for i in ids) for f in filters}} if "rebatched" in runs else {})


def draft_benchmark(args) -> int:
    """``bench_eval.py --draft``: see the module docstring."""
    edits = parse_edits(args.edits)
    bench, selections = workbench_and_selections(args, edits)
    model = bench.model
    cost = token_cost(model)
    hs = harnesses(bench, args)
    ids = list(range(args.limit))
    chunks = [ids[i:i + args.chunk] for i in range(0, len(ids), args.chunk)]
    baseline_store = DraftStore(None, "bench")
    print(f"{args.task}, {args.limit} questions, {args.dtype}, batch {args.batch_size}, threads "
          f"{torch.get_num_threads()}, token cost {cost:.4f}: the unedited model's answers (recorded as drafts)",
          flush=True)
    # today: plain lm-eval HFLM (HF generate), the path a zero-shot batch took before every greedy batch drafted
    order = (("undrafted",) + (("lookup",) if args.lookup else ()) + (("today",) if args.task == ZERO_SHOT_TASK else ())
             + (("batched",) if args.continuous != "off" else ()))
    base_runs = run_paths(hs, {"undrafted": baseline_store, "lookup": DraftStore(None, "bench"),
                               "today": DraftStore(None, "bench"), "batched": DraftStore(None, "bench")},
                          args.task, chunks, args, order=order)
    base = base_runs["undrafted"]
    out = {"args": vars(args), "baseline": {"seconds": base["seconds"], "cpu_seconds": base["cpu_seconds"],
                                            "stats": base["stats"], "records": base["records"]},
           "edits": [], "simulated": []}
    if args.lookup:  # the unedited model's own evaluation, by prompt lookup, against today's
        summary = compare({"name": "unedited, prompt lookup"}, base_runs, len(ids), other="lookup")
        out["lookup"] = {**summary, "runs": base_runs}
        print(json.dumps({k: v for k, v in summary.items() if k != "text_differs"}), flush=True)
    if "today" in base_runs:  # the unedited model: today's path against the greedy loop, undrafted and by lookup
        out["today"] = [compare({"name": f"unedited, {p} vs today's HF generate"}, base_runs, len(ids), other=p,
                                base="today") for p in order if p != "today"]
    if "batched" in base_runs:  # the unedited model: continuous batching against lm-eval's batches, undrafted
        out.setdefault("today", []).append(compare({"name": "unedited, continuous batching vs lm-eval's batches"},
                                                   base_runs, len(ids), other="undrafted", base="batched"))
    answers: dict[str, DraftStore] = {}
    for edit in edits:
        handle = apply_intervention(model, selections[edit["top_k"]], edit["scalar"])
        try:
            print(f"{edit['name']}:", flush=True)
            answers[edit["name"]] = DraftStore(None, "bench")
            runs = run_paths(hs, {"undrafted": answers[edit["name"]], "drafted": baseline_store}, args.task, chunks,
                             args)
            if args.noise_batch:  # the noise floor: undrafted again, in batches of another size
                runs.update(run_paths(hs, {"rebatched": DraftStore(None, "bench")}, args.task, chunks, args,
                                      order=("rebatched",)))
        finally:
            handle.undo()
        summary = compare(edit, runs, len(ids))
        out["edits"].append({**summary, "runs": runs})
        print(json.dumps({k: v for k, v in summary.items() if k != "text_differs"}), flush=True)
        if args.out:
            Path(args.out).write_text(json.dumps(out, indent=1, default=str))
    out["simulated"] = simulate(edits, baseline_store, answers, cost, args.draft_tokens)
    out["tokens"] = {"baseline": {k: baseline_store.get_key(k) for k in baseline_store.keys()},
                     **{name: {k: store.get_key(k) for k in store.keys()} for name, store in answers.items()}}
    print_table(out, args)
    if args.out:
        Path(args.out).write_text(json.dumps(out, indent=1, default=str))
    return 0


def simulate(edits: list[dict], baseline: DraftStore, answers: dict[str, DraftStore], cost: float,
             fixed: int | None) -> list[dict]:
    """Per edit, simulated passes per question: undrafted, drafted from the baseline, from the other scaled point."""
    scaled = [e["name"] for e in edits if e["intervention"] == "scale"]
    rows = []
    for edit in edits:
        store = answers[edit["name"]]
        others = [o for o in scaled if o != edit["name"] and edit["intervention"] == "scale"]
        row = {"edit": edit["name"], "undrafted": 0, "from_baseline": 0}
        for other in others:
            row[f"from {other}"] = 0
        for key in store.keys():
            answer = store.get_key(key)
            row["undrafted"] += len(answer)
            row["from_baseline"] += simulated_passes(answer, baseline.get_key(key), cost, fixed)
            for other in others:
                row[f"from {other}"] += simulated_passes(answer, answers[other].get_key(key), cost, fixed)
        rows.append(row)
    return rows


def print_table(out: dict, args) -> None:
    print(f"\n{args.task}, {args.limit} questions, batch {args.batch_size}, {args.dtype}, {args.model}")
    print("| edit | undrafted s (CPU s) | drafted s (CPU s) | speed-up wall (CPU) | passes undrafted / drafted "
          "(ratio) | drafted / accepted tokens per question | same text | same answer (strict / flexible) | "
          "score undrafted / drafted (strict) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for e in out.get("today", []) + ([out["lookup"]] if "lookup" in out else []) + out["edits"]:
        n = e["questions"]
        answers = " / ".join(f"{e['same_answer'][f]}/{n}" for f in sorted(e["same_answer"],
                                                                          key=lambda f: "strict" not in f))
        strict = next((f for f in e["score"]["undrafted"] if "strict" in f), None)
        print(f"| {e['edit']} | {e['undrafted_s']:.0f} ({e['undrafted_cpu_s']:.0f}) | {e['drafted_s']:.0f} "
              f"({e['drafted_cpu_s']:.0f}) | {e['speedup']:.2f}x ({e['cpu_speedup']:.2f}x) | {e['undrafted_passes']} / "
              f"{e['drafted_passes']} ({e['pass_ratio']:.2f}x) | {e['drafted_per_question']:.1f} / "
              f"{e['accepted_per_question']:.1f} | {e['same_text']}/{n} | {answers} | "
              f"{e['score']['undrafted'].get(strict, 0):.3f} / {e['score']['drafted'].get(strict, 0):.3f} |")
    noise = [e for e in out["edits"] if "rebatched_same_text" in e]
    if noise:
        print("\nnoise floor: undrafted in batches of", args.noise_batch, "against undrafted in batches of",
              args.batch_size)
        for e in noise:
            n = e["questions"]
            print(f"  {e['edit']}: same text {e['rebatched_same_text']}/{n}, same answer "
                  + " / ".join(f"{v}/{n}" for v in e["rebatched_same_answer"].values()))
    print("\nsimulated passes (one row at a time; tokens = undrafted passes):")
    for row in out["simulated"]:
        print("  " + ", ".join(f"{k}: {v}" for k, v in row.items()))
