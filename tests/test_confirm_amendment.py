"""The confirmatory amendment of ANALYSIS_PLAN.md (issue 53): its numbers are the scripts' output, its fresh
examples are disjoint from every committed record's, and its runner keeps every comparison on one machine kind."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch

from mathneuro.methods.selection import Selection
from tests.conftest import load_experiment

ROOT = Path(__file__).resolve().parents[1]
PLAN = (ROOT / "experiments" / "ANALYSIS_PLAN.md").read_text()
LISTS = json.loads((ROOT / "experiments" / "confirm" / "examples.json").read_text())


def _between(text: str, name: str) -> str:
    found = re.search(rf"<!-- {name}:begin -->\n(.*?)<!-- {name}:end -->", text, re.S)
    assert found, f"ANALYSIS_PLAN.md has no {name} block"
    return found.group(1)


def _block() -> dict:
    return json.loads(_between(PLAN, "confirmatory").strip().removeprefix("```json").removesuffix("```"))


def test_the_amendments_power_and_cpu_hours_are_plan_powers_output():
    """The tables the amendment quotes are `plan_power.py --confirmatory`'s output on the committed records."""
    power = load_experiment("claims/confirm_power")
    assert _between(PLAN, "confirm-power") == power.report()


def test_fresh_examples_are_disjoint_from_every_committed_records_examples():
    examples = load_experiment("data/confirm_examples")
    used = examples.used_ids(ROOT / "experiments" / "records")
    assert used[("gsm8k_cot", None)] and used[("race", None)]  # the records were read
    for name, entry in LISTS["sets"].items():
        chosen = entry["chosen"]
        taken = used.get((entry["task"], entry["subtask"]), set())
        assert not set(chosen) & taken, f"{name}: a chosen example was used by a committed record"
        assert len(set(chosen)) == len(chosen) == examples.SIZES[name.split("/")[0]]
        assert all(0 <= i < entry["n"] for i in chosen)
        assert entry["used"] == len(taken) and entry["fresh"] == entry["n"] - len(taken)
    # every MMLU subject and MATH subject the records hold has its list
    subtasks = {e["subtask"] for e in LISTS["sets"].values()}
    assert {s for (t, s) in used if t in ("mmlu", "minerva_math") and s} <= subtasks


def test_the_machine_readable_block_agrees_with_the_lists_and_the_power_scripts_sizes():
    block, power = _block(), load_experiment("claims/confirm_power")
    assert block["examples"]["sha256"] == LISTS["sha256"] and LISTS["sha256"] in PLAN
    assert block["sizes"] == {"gsm8k_cot": power.N_GSM8K, "race": power.N_RACE, "mmlu": power.N_MMLU,
                              "minerva_math": power.N_MATH}
    assert block["seeds"]["claim1"] == list(power.SEEDS) and block["seeds"]["6d"] == list(power.SEEDS_6D)
    assert block["machine_kind"]["cross_kind_pairings"] == [] and block["1b"] == {"decides": 0.2, "reported": [0.1]}
    assert min(block["seeds"]["claim1"]) >= 5  # draws never run before (earlier plans: 0-4)
    runner = (ROOT / "experiments" / "claims" / "claims_confirm.sh").read_text()
    assert 'SEEDS="100 101 102 103"' in runner and 'SEEDS_6D="100 101"' in runner
    assert "eval.limits.gsm8k_cot=200" in runner and "eval.limits.race=400" in runner
    assert "eval.limits.mmlu=20" in runner and "eval.limits.minerva_math=35" in runner


def test_the_examples_folder_holds_only_the_chosen_examples_in_their_order(tmp_path):
    examples = load_experiment("data/confirm_examples")
    data = tmp_path / "data"
    (data / "gsm8k").mkdir(parents=True)
    (data / "gsm8k" / "test.jsonl").write_text("".join(json.dumps({"q": i}) + "\n" for i in range(6)))
    (data / "gsm8k" / "train.jsonl").write_text('{"q": "train"}\n')
    lists = {"sha256": "x", "sets": {"gsm8k": {"file": "gsm8k/test.jsonl", "n": 6, "chosen": [4, 0, 2]}}}
    out = examples.build(data, tmp_path / "fresh", lists)
    assert [json.loads(line)["q"] for line in (out / "gsm8k" / "test.jsonl").read_text().splitlines()] == [4, 0, 2]
    assert (out / "gsm8k" / "train.jsonl").is_symlink()


def test_a_stage_runs_only_on_its_groups_machine_kind_unless_told_and_then_the_group_restarts(tmp_path):
    pack = load_experiment("claims/pack_confirm")
    root, out = tmp_path / "root", tmp_path / "records"
    (root / "base1" / "gsm8k_cot").mkdir(parents=True)
    assert pack.check_kind("base1", root, out, here="Xeon (amx_bf16)") == "Xeon (amx_bf16)"
    state = json.loads((out / "confirm" / "machine_kind.json").read_text())
    assert state["kind"] == "Xeon (amx_bf16)" and state["groups"] == {"claim1": "Xeon (amx_bf16)"}
    pack.check_kind("claim1", root, out, here="Xeon (amx_bf16)")
    with pytest.raises(SystemExit, match="CONFIRM_NEW_KIND"):
        pack.check_kind("claim1", root, out, here="EPYC (avx2)")
    with pytest.raises(SystemExit):  # a group that has not started runs on the amendment's kind
        pack.check_kind("claim45", root, out, here="EPYC (avx2)")
    (out / "confirm" / "prune").mkdir()
    (out / "confirm" / "prune" / "baseline-x.jsonl.gz").write_bytes(b"")
    pack.check_kind("claim1", root, out, here="EPYC (avx2)", new_kind=True)
    state = json.loads((out / "confirm" / "machine_kind.json").read_text())
    assert state["groups"]["claim1"] == "EPYC (avx2)" and state["kind"] == "Xeon (amx_bf16)"
    restarts = [(r["group"], r["from"], r["to"]) for r in state["restarts"]]
    assert restarts == [("claim1", "Xeon (amx_bf16)", "EPYC (avx2)")]
    assert not (root / "base1").exists() and (root / "abandoned" / "xeon__amx_bf16" / "base1" / "gsm8k_cot").is_dir()
    assert not (out / "confirm" / "prune").exists()  # the old kind's records go; no comparison mixes kinds


def test_first_stage_refuses_an_unplanned_kind_unless_told(tmp_path, capsys):
    """The amendment's first stage binds every group to its kind, so it starts only on the planned kind (the
    block's ``machine_kind.planned``) unless told; once started, later stages follow the recorded kind."""
    pack = load_experiment("claims/pack_confirm")
    root, out = tmp_path / "root", tmp_path / "records"
    assert pack.planned_kind() == "Intel(R) Xeon(R) Processor (amx_bf16+avx512_bf16+avx512f+avx2)"
    with pytest.raises(SystemExit, match="CONFIRM_UNPLANNED_KIND"):
        pack.check_kind("claim45", root, out, here="AMD EPYC (avx2)", planned="Xeon (amx_bf16)")
    assert not (out / "confirm" / "machine_kind.json").exists()  # nothing recorded by a refusal
    assert pack.check_kind("claim45", root, out, here="AMD EPYC (avx2)", planned="Xeon (amx_bf16)",
                           unplanned=True) == "AMD EPYC (avx2)"
    # the amendment has started: the next group follows its kind, the planned one needs CONFIRM_NEW_KIND
    assert pack.check_kind("base1", root, out, here="AMD EPYC (avx2)", planned="Xeon (amx_bf16)") == "AMD EPYC (avx2)"
    with pytest.raises(SystemExit, match="CONFIRM_NEW_KIND"):
        pack.check_kind("base6d", root, out, here="Xeon (amx_bf16)", planned="Xeon (amx_bf16)")
    assert pack.main(["where"]) == 0
    here = capsys.readouterr().out
    assert here.startswith(f"this machine: {pack.this_machine()}")
    assert ("not the planned" in here) == (pack.this_machine() != pack.planned_kind())


def test_claim5_packs_overlap_records_that_the_claims_table_reads(tmp_path):
    """pack_confirm writes claim 5's per-matrix counts in the one format claims.py reads (``overlap`` records under
    confirm/data_efficiency/pairs): each matrix's sizes and intersection, each selection file's sha256."""
    import hashlib

    from claimslib.confirm import confirm_tree, read_amendment
    from claimslib.records import read_study

    pack, claims = load_experiment("claims/pack_confirm"), load_experiment("claims/claims")
    root, out = tmp_path / "root", tmp_path / "records"
    for seed, bits in ((100, [1, 1, 0, 0]), (101, [1, 0, 1, 0])):
        job = root / "claim45" / "claim5" / f"n100_seed{seed}"
        (job / ".hydra").mkdir(parents=True)
        Selection(masks={"m.weight": torch.tensor(bits, dtype=torch.bool).reshape(2, 2)},
                  neurons={"act": torch.tensor([seed, 5])}, method="mathneuro").save(job / "selection.safetensors")
        point = {"model": claims.MODEL, "task": "gsm8k", "filter": "mmlu", "method": "mathneuro", "top_k": 0.15,
                 "intervention": "prune", "scalar": 0.0, "seed": seed, "num_samples": 100}
        (job / "results.json").write_text(json.dumps({"status": "complete", "point": point, "metrics": {}}))
    pack._claim5(root, out / "confirm" / "data_efficiency")
    (record,) = read_study(out / "confirm" / "data_efficiency" / "pairs")
    assert record.kind == "overlap" and record.header["set"] == "M"
    by = {r["matrix"]: (r["size_a"], r["size_b"], r["intersection"]) for r in record.rows}
    assert by == {"m.weight": (2, 2, 1), "neurons::act": (2, 2, 1)}
    sel = root / "claim45" / "claim5" / "n100_seed100" / "selection.safetensors"
    assert record.header["a"]["sha256"] == {"M": hashlib.sha256(sel.read_bytes()).hexdigest()}
    tree = confirm_tree(out, read_amendment(PLAN))
    assert claims.claim5(tree, study="pairs")["at"][100]["a_in_b_mean"] == pytest.approx(0.5)


def test_pack_puts_a_groups_baseline_and_points_together_under_records_confirm(tmp_path):
    """base1 + claim1 -> records/confirm/prune: one unedited evaluation, every point paired with it; nothing of the
    amended plan's folders is touched."""
    from claimslib import records

    from tests.records_sweeps import GSM, RACE, lose, write_point

    pack = load_experiment("claims/pack_confirm")
    root, out = tmp_path / "root", tmp_path / "records"
    for task, values in (("gsm8k", GSM), ("race", RACE)):
        folder = root / "base1" / task
        folder.mkdir(parents=True)
        (folder / f"{task}.jsonl").write_text("".join(json.dumps({"doc_id": i, "acc": v, "exact_match,strict-match": v})
                                                      + "\n" for i, v in enumerate(values)))
        (folder / "metrics.json").write_text(json.dumps({"metrics": {f"x/{task}/acc": 0.5}}))
    write_point(root / "claim1", "0", "mathneuro", 100, {"gsm": lose(GSM, 10), "race": lose(RACE, 2)})
    write_point(root / "claim1", "1", "random", 100, {"gsm": lose(GSM, 1), "race": RACE})
    written = pack.pack(root, out)
    assert written and all(p.parent == out / "confirm" / "prune" for p in written)
    study = {p.name: p for p in records.read_study(out / "confirm" / "prune")}
    (base,) = [p for p in study.values() if p.kind == "baseline"]
    points = [p for p in study.values() if p.kind == "point"]
    assert len(points) == 2 and all(p.header["baseline"] == base.name for p in points)
    assert {p.point["seed"] for p in points} == {100}
    assert sorted(d.name for d in out.iterdir()) == ["confirm"]
    assert pack.pack(root, out) == written  # deterministic: packing again writes the same files


def test_the_amendments_own_records_do_not_change_the_lists(tmp_path):
    """Records under records/confirm*/ index the fresh lists, not the files: they are not 'used' examples."""
    examples = load_experiment("data/confirm_examples")
    from claimslib import records

    records.write_packed(tmp_path / "confirm" / "prune" / "p.jsonl.gz", {"kind": "point", "name": "p"},
                         [{"task": "gsm8k_cot", "doc_id": 3, "acc": 1}])
    records.write_packed(tmp_path / "prune" / "q.jsonl.gz", {"kind": "point", "name": "q"},
                         [{"task": "gsm8k_cot", "doc_id": 7, "acc": 1}])
    assert examples.used_ids(tmp_path) == {("gsm8k_cot", None): {7}}
