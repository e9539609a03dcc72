"""claimslib.records and experiments/claims/pack_records.py: a sweep's run dirs packed into the
committed layout and read back, byte-for-byte reproducibly."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from claimslib import records
from omegaconf import OmegaConf

from mathneuro.evaluation.samples import pooled_records, records_from_lm_eval, write_records
from mathneuro.pipeline.runner import run_point
from tests.conftest import load_experiment
from tests.records_sweeps import GSM, RACE, lose, records_sweep, write_point, write_samples
from tests.test_runner import base_overrides, compose_cfg


@pytest.fixture
def sweep(tmp_path: Path) -> Path:
    return records_sweep(
        tmp_path / "sweep",
        ("0", "mathneuro", 0, {"gsm": lose(GSM, 10), "race": lose(RACE, 2)}),
        ("1", "random", 0, {"gsm": lose(GSM, 1), "race": RACE}),
        ("2", "random", 0, {"gsm": lose(GSM, 3), "race": RACE}, {"reference": "wanda"}),
        ("3", "wanda", 0, None),  # no records: not packed
    )


def test_a_sweep_packs_into_one_file_per_point_and_one_baseline(sweep: Path, tmp_path: Path) -> None:
    out = tmp_path / "records" / "prune"
    written = records.pack_sweep(sweep, out, study="prune")
    names = sorted(p.name for p in written)
    assert len(names) == 4 and sum(n.startswith("baseline-") for n in names) == 1
    assert "mathneuro__race__k0.05__prune0.0__n10__seed0.jsonl.gz" in names
    assert "random-wanda__race__k0.05__prune0.0__n10__seed0.jsonl.gz" in names
    study = {p.name: p for p in records.read_study(out)}
    m = study["mathneuro__race__k0.05__prune0.0__n10__seed0"]
    assert m.kind == "point" and m.point["method"] == "mathneuro" and m.header["study"] == "prune"
    assert m.header["baseline"] in study and study[m.header["baseline"]].kind == "baseline"
    gsm = m.task("gsm8k")
    assert len(gsm) == 30 and sum(v["exact_match,strict-match"] for v in gsm.values()) == sum(GSM) - 10
    assert all("answer" not in v for v in gsm.values())  # strings are left out
    base = study[m.header["baseline"]].task("race")
    assert sum(v["acc"] for v in base.values()) == sum(RACE)
    again = records.pack_sweep(sweep, tmp_path / "again" / "prune", study="prune")
    assert [p.read_bytes() for p in sorted(written)] == [p.read_bytes() for p in sorted(again)]  # reproducible
    assert records.read_tree(tmp_path / "records").keys() == {"prune"}


def test_pooled_group_records_replace_their_subtask_files(tmp_path: Path) -> None:
    by_subtask = {"mmlu_a": [{"doc_id": 0, "acc": 1.0}], "mmlu_b": [{"doc_id": 0, "acc": 0.0}]}
    folder = tmp_path / "samples"
    for name, rows in by_subtask.items():
        write_records(folder, name, rows)
    write_records(folder, "mmlu", pooled_records(by_subtask))
    lines = records._sample_lines(folder, ["mmlu", "mmlu_a", "mmlu_b"])
    assert {(x["task"], x.get("subtask"), x["doc_id"]) for x in lines} == {("mmlu", "mmlu_a", 0), ("mmlu", "mmlu_b", 0)}
    path = records.write_packed(tmp_path / "p.jsonl.gz", {"kind": "point", "name": "p", "point": {}}, lines)
    packed = records.read_packed(path)
    assert packed.task("mmlu") == {("mmlu_a", 0): {"acc": 1.0}, ("mmlu_b", 0): {"acc": 0.0}}


def test_perplexity_pairs_survive_from_lm_eval_to_the_packed_file(tmp_path: Path) -> None:
    logged = [{"doc_id": 0, "filter": "none", "metrics": ["word_perplexity", "bits_per_byte"],
               "word_perplexity": (-120.5, 40), "bits_per_byte": (-120.5, 200)}]
    (record,) = records_from_lm_eval(logged)
    assert record == {"doc_id": 0, "word_perplexity": [-120.5, 40.0], "bits_per_byte": [-120.5, 200.0]}
    line = records.example_line("wikitext_local", {**record, "answer": "x", "flag": True})
    assert line == {"task": "wikitext_local", "doc_id": 0, "word_perplexity": [-120.5, 40.0],
                    "bits_per_byte": [-120.5, 200.0], "flag": 1}


def _run_dir(root: Path, name: str, seed: int, task_rows: dict[str, list[dict]], **fields) -> None:
    """A run dir evaluated without its own baseline (eval.baseline=false) on ``task_rows``' tasks."""
    job = root / name
    (job / ".hydra").mkdir(parents=True)
    for task, rows in task_rows.items():
        write_records(job / "samples", task, rows)
    point = {"model": "tiny", "task": "gsm8k", "filter": "mmlu", "method": "mathneuro", "top_k": 0.15,
             "intervention": "prune", "scalar": 0.0, "seed": seed, "num_samples": 100}
    result = {"status": "complete", "point": point,
              "metrics": {f"nonmath/{t}/acc": 0.5 for t in task_rows},
              "samples": {"dir": "samples", "tasks": {t: "nonmath" for t in task_rows}}, **fields}
    (job / "results.json").write_text(json.dumps(result))


def test_a_point_evaluated_in_two_runs_over_different_tasks_packs_as_one_record(tmp_path: Path) -> None:
    """claims_amended.sh's claim 6: the generalisation tasks in one sweep, WikiText in another, one record per point
    (claims.py pairs one record per draw); a run repeating a task stays apart, under a short name."""
    ppl = [{"doc_id": 0, "word_perplexity": [-120.5, 40.0]}]
    acc = [{"doc_id": i, "acc": float(i % 2)} for i in range(4)]
    _run_dir(tmp_path / "tasks", "a" * 200, 0, {"piqa": acc, "hellaswag": acc},
             hardware={"cpu": "x"}, provenance={"commit": "1"})
    _run_dir(tmp_path / "ppl", "b" * 200, 0, {"wikitext": ppl}, hardware={"cpu": "x"}, provenance={"commit": "2"})
    _run_dir(tmp_path / "ppl", "c" * 200, 1, {"wikitext": ppl})
    _run_dir(tmp_path / "again", "d" * 200, 1, {"wikitext": ppl})  # draw 1's WikiText once more
    written = records.pack_sweep([tmp_path / "tasks", tmp_path / "ppl", tmp_path / "again"], tmp_path / "rec",
                                 study="generalisation", baseline="baseline-x")
    study = {p.name: p for p in records.read_study(tmp_path / "rec")}
    assert len(written) == 3 and all(len(p.name) < 120 for p in written)
    draw0 = study["mathneuro__mmlu__k0.15__prune0.0__n100__seed0"]
    assert set(draw0.examples) == {"piqa", "hellaswag", "wikitext"} and draw0.header["baseline"] == "baseline-x"
    assert draw0.header["tasks"] == {"piqa": "nonmath", "hellaswag": "nonmath", "wikitext": "nonmath"}
    assert set(draw0.header["metrics"]) == {"nonmath/piqa/acc", "nonmath/hellaswag/acc", "nonmath/wikitext/acc"}
    assert [(r["tasks"], r["provenance"]) for r in draw0.header["runs"]] == [
        (["hellaswag", "piqa"], {"commit": "1"}), (["wikitext"], {"commit": "2"})]
    assert draw0.task("wikitext") == {0: {"word_perplexity": [-120.5, 40.0]}}
    draw1 = sorted(n for n in study if "seed1" in n)
    assert draw1[0] == "mathneuro__mmlu__k0.15__prune0.0__n100__seed1" and "runs" not in study[draw1[0]].header
    assert len(draw1) == 2 and draw1[1].startswith(draw1[0] + "__")


def test_tables_and_bad_files(tmp_path: Path) -> None:
    csv_path = tmp_path / "data_efficiency.csv"
    csv_path.write_text("model,num_samples,a_in_b_mean,note\nq,1,0.25,\nq,100,0.9,x\n")
    packed = records.read_packed(records.pack_table(csv_path, tmp_path / "r", study="eff", name="q_mmlu"))
    assert packed.kind == "table" and packed.rows == [
        {"model": "q", "num_samples": 1, "a_in_b_mean": 0.25, "note": None},
        {"model": "q", "num_samples": 100, "a_in_b_mean": 0.9, "note": "x"}]
    bad = tmp_path / "bad.jsonl.gz"
    with gzip.open(bad, "wt") as fh:
        fh.write(json.dumps({"doc_id": 1}) + "\n")
    with pytest.raises(ValueError, match="not a packed records file"):
        records.read_packed(bad)


def test_the_packer_script(sweep: Path, tmp_path: Path, capsys) -> None:
    pack = load_experiment("claims/pack_records")
    assert pack.main(["--study", "prune", "--out", str(tmp_path / "rec"), str(sweep)]) == 0
    assert "4 file(s)" in capsys.readouterr().out
    assert pack.main(["--study", "prune", "--out", str(tmp_path / "rec"), str(tmp_path / "nope")]) == 2
    assert pack.main(["--study", "x", "--table", str(tmp_path / "t.csv")]) == 2  # --table needs --name


def test_a_real_run_point_packs_and_its_records_average_to_its_metrics(tiny_dir: Path, tmp_path: Path) -> None:
    """The runner's own results.json and samples (absolute baseline_dir, probe records), packed."""
    cfg = compose_cfg([*base_overrides(tiny_dir, tmp_path / "cache"), "num_samples=4", "max_length=32",
                       "logger=none", "eval=quick", "eval.tasks=[arith]", "eval.log_samples=true",
                       "eval.arith.num_problems=6", "top_k=0.2"])
    result = run_point(OmegaConf.to_object(cfg), tmp_path / "sweep" / "0")
    written = records.pack_sweep(tmp_path / "sweep", tmp_path / "rec", study="s")
    study = {p.kind: p for p in records.read_study(tmp_path / "rec")}
    point, base = study["point"], study["baseline"]
    assert len(written) == 2 and point.header["baseline"] == base.name
    assert point.header["selection"]["num_selected"] == result["selection"]["num_selected"]
    for packed, metrics in ((point, result["metrics"]), (base, result["baseline_metrics"])):
        values = [v["exact_match"] for v in packed.task("arith").values()]
        assert len(values) == 6 and sum(values) / 6 == pytest.approx(metrics["math/arith/exact_match"])


def test_a_baseline_evaluated_task_by_task_pairs_with_points_run_without_their_own(sweep: Path, tmp_path: Path) -> None:
    """The amended plan's layout (experiments/claims/baseline_eval.py, pack_amended.py): points run with
    eval.baseline=false, and one unedited evaluation made one task at a time is every point's reference."""
    import shutil

    folder = tmp_path / "baseline"
    shutil.move(str(sweep / "baseline_samples"), folder)  # the points have no baseline of their own now
    (folder / "metrics.json").write_text(json.dumps({"metrics": {"math/gsm8k/exact_match,strict-match": 0.5}}))
    out = tmp_path / "records" / "prune"
    base = records.pack_baseline({"gsm8k": folder, "race": folder, "absent": tmp_path / "nothing"}, out,
                                 study="prune", model="tiny")
    written = records.pack_sweep(sweep, out, study="prune", baseline=base.name[: -len(records.SUFFIX)])
    study = {p.name: p for p in records.read_study(out)}
    baseline = study[base.name[: -len(records.SUFFIX)]]
    assert baseline.kind == "baseline" and baseline.header["tasks"] == ["gsm8k", "race"]
    assert sum(v["acc"] for v in baseline.task("race").values()) == sum(RACE)
    points = [study[p.name[: -len(records.SUFFIX)]] for p in written]
    assert len(points) == 3 and all(p.header["baseline"] == baseline.name for p in points)
    assert records.pack_baseline({"gsm8k": tmp_path / "nothing"}, out, study="prune") is None


def test_the_amended_pack_commits_the_baseline_before_the_points_and_keeps_one_a_point_pairs_with(
        tmp_path: Path) -> None:
    """pack_amended.py: every study gets the unedited evaluation (with the machine of each task) as soon as
    it is there; a later, larger baseline replaces an older one unless a committed point is paired with it."""
    pack_amended = load_experiment("claims/pack_amended")
    root, out = tmp_path / "root", tmp_path / "records"
    amx = {"device": "cpu", "device_name": "Intel(R) Xeon(R) Processor", "dtype": "bfloat16", "threads": 1}

    def task(name: str, values: list[float], hardware: dict | None = None) -> None:
        folder = root / "baseline" / name
        folder.mkdir(parents=True)
        (folder / f"{name}.jsonl").write_text("".join(json.dumps({"doc_id": i, "acc": v}) + "\n"
                                                      for i, v in enumerate(values)))
        (folder / "metrics.json").write_text(json.dumps({"metrics": {f"nonmath/{name}/acc": sum(values) / len(values)},
                                                         **({"hardware": hardware} if hardware else {})}))

    task("race", [1.0, 0.0, 1.0])
    pack_amended.pack(root, out)
    (first,) = (out / "prune").glob("baseline-*")
    unpaired = out / "scale" / "baseline-unpaired.jsonl.gz"  # an older baseline no committed point pairs with
    records.write_packed(unpaired, {"kind": "baseline", "study": "scale", "name": "baseline-unpaired"}, [])
    records.write_packed(out / "prune" / "mathneuro__seed0.jsonl.gz",  # a committed point, paired with the first
                         {"kind": "point", "study": "prune", "name": "mathneuro__seed0",
                          "baseline": first.name[: -len(records.SUFFIX)]}, [])
    task("hellaswag", [0.0, 1.0], amx)
    pack_amended.pack(root, out)
    for study in ("prune", "scale", "generalisation"):
        latest = [p for p in records.read_study(out / study) if p.kind == "baseline" and len(p.header["tasks"]) == 2]
        assert len(latest) == 1 and latest[0].header["task_hardware"] == {"hellaswag": amx}
        assert latest[0].header["task_machines"] == {  # named at pack time; flags never invented
            "hellaswag": "Intel(R) Xeon(R) Processor (CPU flags not recorded)", "race": "not recorded"}
        assert sum(v["acc"] for v in latest[0].task("hellaswag").values()) == 1.0
    assert first.exists() and not unpaired.exists()


def test_claim_3s_points_pair_with_an_unedited_evaluation_made_on_their_own_kind_of_cpu(tmp_path: Path) -> None:
    """pack_amended.py (amendment of 2026-12-07): a scale point pairs with the baseline tasks its machine made,
    ROOT/baseline's where they were made there (its metrics.json or the noted hardware says so), else the
    machine's own under ROOT/baseline_cpu/; a machine with neither is not packed; other studies keep the one
    baseline."""
    pack_amended = load_experiment("claims/pack_amended")
    root, out = tmp_path / "root", tmp_path / "records"
    epyc, xeon = ({"device": "cpu", "device_name": name, "dtype": "bfloat16"} for name in ("AMD EPYC", "Xeon"))

    def baseline(folder: Path, gsm: list[float], race: list[float], hardware: dict | None) -> None:
        write_samples(folder / "gsm8k", gsm, [])
        write_samples(folder / "race", [], race)
        for task in ("gsm8k", "race"):
            (folder / task / ("race.jsonl" if task == "gsm8k" else "gsm8k.jsonl")).unlink()
            (folder / task / "metrics.json").write_text(json.dumps({"metrics": {}, **({"hardware": hardware}
                                                                                       if hardware else {})}))
        (folder / "race" / "race_high.jsonl").write_text((folder / "race" / "race.jsonl").read_text())  # a subtask

    baseline(root / "baseline", GSM, RACE, None)  # made before the hardware field: noted
    (out / "amended_baseline_raw").mkdir(parents=True)
    (out / "amended_baseline_raw" / "hardware_noted.json").write_text(json.dumps({"gsm8k": epyc, "race": epyc}))
    assert pack_amended.own_baseline_dir(root, ["gsm8k", "race"], out, machine="AMD EPYC") is None
    own = pack_amended.own_baseline_dir(root, ["gsm8k", "race"], out, machine="Xeon")
    assert own == root / "baseline_cpu" / "xeon"
    baseline(own, lose(GSM, 1), RACE, xeon)  # the Xeon's own unedited answers differ on one question
    for job, seed, hardware in (("0", 0, epyc), ("1", 1, xeon), ("2", 2, {"device_name": "Other"}), ("3", 3, xeon)):
        write_point(root / "claim3", job, "mathneuro", seed, {"gsm": lose(GSM, 2), "race": RACE},
                    intervention="scale", scalar=1.1)
        result = json.loads((root / "claim3" / job / "results.json").read_text())
        result["hardware"] = hardware
        result["samples"]["tasks"]["race_high"] = "nonmath"  # lm-eval's subtask of a group, in the group's folder
        (root / "claim3" / job / "samples" / "race_high.jsonl").write_text(
            (root / "claim3" / job / "samples" / "race.jsonl").read_text())
        if seed == 3:  # resumed on the Xeon from an attempt on the EPYC that had finished its RACE
            result["computed_elsewhere"] = {"race": "AMD EPYC"}
        (root / "claim3" / job / "results.json").write_text(json.dumps(result))
    pack_amended.pack(root, out, table=False)
    study = {p.name: p for p in records.read_study(out / "scale")}
    points = {p.point["seed"]: p for p in study.values() if p.kind == "point"}
    assert sorted(points) == [0, 1]  # Other has no unedited evaluation of its own; seed 3 mixes two machines
    main = study[points[0].header["baseline"]]
    assert main.header["task_hardware"] == {"gsm8k": epyc, "race": epyc} and main.header["tasks"] == ["gsm8k", "race"]
    assert [p.name for p in study.values() if p.kind == "baseline" and p is not main] == [points[1].header["baseline"]]
    theirs = study[points[1].header["baseline"]]
    assert theirs.header["task_hardware"] == {"gsm8k": xeon, "race": xeon}
    assert sum(v["exact_match,strict-match"] for v in theirs.task("gsm8k").values()) == sum(GSM) - 1
    assert sum(v["exact_match,strict-match"] for v in main.task("gsm8k").values()) == sum(GSM)
    prune = [p for p in records.read_study(out / "prune") if p.kind == "baseline"]
    assert [p.name for p in prune] == [main.name]  # the other studies: the one baseline, noted hardware included


def test_a_stage_reruns_only_the_points_whose_records_are_not_packed(tmp_path: Path) -> None:
    """claims_amended.sh asks pack_amended.py which methods of a draw lack a packed point (a fresh machine has
    no run dirs): a point counts as packed only with the task asked for, so claim 6's WikiText run does not stand
    in for its point's other tasks, nor they for it (a record made before the runs were packed as one)."""
    pack_amended = load_experiment("claims/pack_amended")
    study = tmp_path / "generalisation"
    point = {"method": "mathneuro", "filter": "mmlu", "seed": 0, "top_k": 0.15}
    records.write_packed(study / "mathneuro__mmlu__k0.15__prune0.0__n100__seed0.jsonl.gz",
                         {"kind": "point", "point": point, "tasks": {"minerva_math": "math", "mathqa": "math"}}, [])
    records.write_packed(study / "random__mmlu__k0.15__prune0.0__n100__seed0__job3.jsonl.gz",
                         {"kind": "point", "point": {**point, "method": "random"}, "tasks": {"wikitext": "nonmath"}},
                         [])
    records.write_packed(study / "baseline-abc.jsonl.gz", {"kind": "baseline", "point": point,
                                                           "tasks": {"wikitext": "nonmath"}}, [])

    def unpacked(*args: str) -> str:
        import contextlib
        import io

        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            assert pack_amended.main(["--out", str(tmp_path), "--unpacked", *args]) == 0
        return out.getvalue().strip()

    assert unpacked("generalisation", "mmlu", "0", "minerva_math", "mathneuro", "random") == "random"
    assert unpacked("generalisation", "mmlu", "0", "wikitext", "mathneuro", "random") == "mathneuro"
    assert unpacked("generalisation", "mmlu", "1", "minerva_math", "mathneuro", "random") == "mathneuro,random"
    assert unpacked("generalisation", "race", "0", "-", "mathneuro") == "mathneuro"  # another filter
    assert unpacked("generalisation", "mmlu", "0", "-", "mathneuro", "random") == ""  # any task
    assert unpacked("scale", "mmlu", "0", "gsm8k_cot", "mathneuro") == "mathneuro"  # no such study yet


def test_record_headers_name_their_machine_and_older_ones_are_labelled_from_their_own_fields(tmp_path: Path) -> None:
    """label_machines: a header gains the labels packing writes now, from its own hardware fields (noted hardware
    says so); example lines stay as they were; a second pass changes nothing."""
    epyc = {"device": "cpu", "device_name": "AMD EPYC", "cpu_flags": ["avx512_bf16"], "dtype": "bfloat16"}
    point = records.write_packed(tmp_path / "p.jsonl.gz", {"kind": "point", "name": "p", "hardware": epyc},
                                 [{"task": "race", "doc_id": 0, "acc": 1}])
    base = records.write_packed(tmp_path / "b.jsonl.gz", {"kind": "baseline", "name": "b", "tasks": ["race", "mmlu"],
                                                         "task_hardware": {"race": {**epyc, "noted": "stop 47"}}}, [])
    assert records.label_machines(point) and records.label_machines(base)
    assert not records.label_machines(point) and not records.label_machines(base)
    labelled = records.read_packed(point)
    assert labelled.header["machine"] == "AMD EPYC (avx512_bf16)" and labelled.task("race") == {0: {"acc": 1}}
    assert records.read_packed(base).header["task_machines"] == {
        "race": "AMD EPYC (avx512_bf16), noted, not recorded", "mmlu": "not recorded"}
