"""mathneuro.data.datasets: loading records, templates, sample draws, embedded demo data and the task/filter configs."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from mathneuro.data.datasets import (
    DatasetConfig,
    draw_samples,
    embedded_datasets,
    load_records,
    render,
    sample_ids_hash,
    template_fields,
)

ROOT = Path(__file__).resolve().parent.parent
CONF = ROOT / "conf"
RECORDS = [{"question": "What is 2+3?", "answer": "2+3=5\n#### 5"}, {"question": "What is 4*2?", "answer": "#### 8"}]


@pytest.fixture(autouse=True)
def _offline(monkeypatch, tmp_path):
    """`datasets` stays offline and caches into the test's temp dir."""
    import datasets.config
    import huggingface_hub.constants

    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf-datasets")


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def records_of(cfg: DatasetConfig, group: str) -> list[dict]:
    cfg.validate(group)
    return load_records(cfg.path, split=cfg.split, name=cfg.subset, key=f"{group}.path")


def dataset_conf(group: str, name: str) -> DatasetConfig:
    merged = OmegaConf.merge(OmegaConf.structured(DatasetConfig), OmegaConf.load(CONF / group / f"{name}.yaml"))
    return OmegaConf.to_object(merged)


# --------------------------------------------------------------------------- loading


def test_load_jsonl_json_csv_tsv(tmp_path):
    assert load_records(str(write_jsonl(tmp_path / "a.jsonl", RECORDS))) == RECORDS
    (tmp_path / "b.json").write_text(json.dumps(RECORDS))
    assert load_records(str(tmp_path / "b.json")) == RECORDS
    (tmp_path / "c.json").write_text(json.dumps({"train": RECORDS, "test": RECORDS[:1]}))
    assert load_records(str(tmp_path / "c.json"), split="test") == RECORDS[:1]
    (tmp_path / "d.csv").write_text('instruction,response\n"Name a colour.","Blue, for one."\nSay hi.,Hi\n')
    assert load_records(str(tmp_path / "d.csv")) == [
        {"instruction": "Name a colour.", "response": "Blue, for one."}, {"instruction": "Say hi.", "response": "Hi"}]
    (tmp_path / "e.tsv").write_text("q\ta\nx\ty\n")
    assert load_records(str(tmp_path / "e.tsv")) == [{"q": "x", "a": "y"}]


def test_load_ignores_subset_and_split_for_a_single_file(tmp_path):
    path = write_jsonl(tmp_path / "race_dev.jsonl", RECORDS)
    assert load_records(str(path), split="validation", name="all") == RECORDS


def test_load_directory_by_split(tmp_path):
    write_jsonl(tmp_path / "train.jsonl", RECORDS)
    write_jsonl(tmp_path / "test.jsonl", RECORDS[:1])
    assert load_records(str(tmp_path), split="test") == RECORDS[:1]
    with pytest.raises(ValueError, match=r"task\.path: .* must hold exactly one data file.*test\.jsonl, train\.jsonl"):
        load_records(str(tmp_path), key="task.path")
    with pytest.raises(ValueError, match=r"no data file named dev\.<ext>"):
        load_records(str(tmp_path), split="dev")


def test_load_datasets_folder_and_data_files(tmp_path):
    import datasets

    datasets.DatasetDict({"train": datasets.Dataset.from_list(RECORDS)}).save_to_disk(str(tmp_path / "saved"))
    assert load_records(str(tmp_path / "saved"), split="train") == RECORDS
    assert load_records(str(tmp_path / "saved")) == RECORDS  # the only split
    path = write_jsonl(tmp_path / "x.jsonl", RECORDS)
    assert load_records("json", data_files={"train": str(path)}, split="train") == RECORDS


def test_load_errors(tmp_path):
    with pytest.raises(ValueError, match=r"^task\.path: file not found: '.*missing\.jsonl'"):
        load_records(str(tmp_path / "missing.jsonl"), key="task.path")
    with pytest.raises(ValueError, match=r"^filter\.path: file not found"):
        load_records("./nowhere/data.csv", key="filter.path")
    (tmp_path / "empty.jsonl").write_text("\n")
    with pytest.raises(ValueError, match=r"task\.path: .*empty\.jsonl has no records"):
        load_records(str(tmp_path / "empty.jsonl"), key="task.path")
    (tmp_path / "scalars.jsonl").write_text("1\n2\n")
    with pytest.raises(ValueError, match=r"record 0 is a int, not an object"):
        load_records(str(tmp_path / "scalars.jsonl"))
    (tmp_path / "broken.jsonl").write_text('{"a": 1}\n{"a": \n')
    with pytest.raises(ValueError, match=r"broken\.jsonl:2: not valid JSON"):
        load_records(str(tmp_path / "broken.jsonl"))
    with pytest.raises(ValueError, match=r"task\.path: empty"):
        load_records("", key="task.path")
    # a byte that is not UTF-8: the file, its line and column (not "can't decode byte 0xe9 in position 1324")
    for suffix, head, bad in ((".jsonl", b'{"q": "a"}\n' * 40, b'{"q": "caf\xe9"}\n'),
                              (".csv", b"q\n" + b"a\n" * 40, b"caf\xe9\n"),
                              (".json", b"[\n" + b'{"q": "a"},\n' * 40, b'{"q": "caf\xe9"}]\n')):
        path = tmp_path / f"latin1{suffix}"
        path.write_bytes(head + bad)
        line = head.count(b"\n") + 1
        with pytest.raises(ValueError) as info:
            load_records(str(path), key="task.path")
        assert str(info.value).startswith(f"task.path: {path}:{line}: not UTF-8 text (byte 0xe9 at column ")
    with pytest.raises(ValueError, match=r"unknown embedded dataset 'embedded://nope'; available: embedded://math_demo"):
        load_records("embedded://nope")
    # a Hub id while offline: a clear error, no network
    with pytest.raises(ValueError,
                       match=r"task\.path: could not load 'nobody-mathneuro/no-such-dataset'.*local \.jsonl"):
        load_records("nobody-mathneuro/no-such-dataset", split="train", key="task.path")


# --------------------------------------------------------------------------- templates


def test_render_fields_and_errors():
    assert render(RECORDS, "Q: {question}\nA: {answer}") == [
        "Q: What is 2+3?\nA: 2+3=5\n#### 5", "Q: What is 4*2?\nA: #### 8"]
    with pytest.raises(ValueError) as err:
        render(RECORDS, "{question} {foo}", key="task.template")
    assert str(err.value) == "task.template: field 'foo' not in the data; available: question, answer"
    with pytest.raises(ValueError, match=r"field 'answer' not in the data \(record 1\)"):
        render([{"question": "a", "answer": "b"}, {"question": "c"}], "{question}{answer}")
    with pytest.raises(ValueError, match=r"task\.template: not a valid format string"):
        render(RECORDS, "{question", key="task.template")
    with pytest.raises(ValueError, match=r"positional field \{\} not allowed"):
        render(RECORDS, "{} and {question}")
    with pytest.raises(ValueError, match=r"template: empty"):
        render(RECORDS, "")
    assert render([{"q": "x"}], "{{literal}} {q}") == ["{literal} x"]
    assert render([{"opts": ["a", "b"], "meta": {"k": "v"}}], "{opts[1]} {meta[k]}") == ["b v"]
    with pytest.raises(ValueError, match=r"cannot format record 0: IndexError"):
        render([{"opts": ["a"]}], "{opts[3]}")
    assert template_fields("{a} {b[0]} {c.real} {a}") == ["a", "b", "c"]


def test_render_multiple_choice_derived_fields():
    race = {"article": "Tom went home.", "question": "Where did Tom go?", "options": ["home", "school", "park", "shop"],
            "answer": "A"}
    text = render([race], "{article}\nQuestion: {question}\n{options_lettered}\nAnswer: {answer}. {answer_text}")[0]
    assert text == ("Tom went home.\nQuestion: Where did Tom go?\nA. home\nB. school\nC. park\nD. shop\n"
                    "Answer: A. home")
    mmlu = {"question": "2+2?", "choices": ["3", "4", "5", "6"], "answer": 1}
    assert render([mmlu], "{choices_lettered}|{answer_letter}|{answer_text}") == ["A. 3\nB. 4\nC. 5\nD. 6|B|4"]
    arc = {"choices": {"text": ["red", "blue"], "label": ["1", "2"]}, "answer": "2"}
    assert render([arc], "{choices_lettered} -> {answer_text}") == ["1. red\n2. blue -> blue"]
    own = dict(mmlu, answer_text="four")  # a record's own field wins
    assert render([own], "{answer_text}") == ["four"]
    with pytest.raises(ValueError, match=r"field 'options_lettered' not in the data; available: question, choices, "
                                         r"answer \(derived: choices_lettered, answer_letter, answer_text\)"):
        render([mmlu], "{options_lettered}")


# --------------------------------------------------------------------------- draws


def test_bootstrap_draws_are_seeded_and_with_replacement():
    a = draw_samples(10, 500, seed=0, bootstrap=True)
    assert len(a) == 500 and all(0 <= i < 10 for i in a) and len(set(a)) == 10  # repeats happen
    random.seed(123)
    torch.manual_seed(123)
    assert draw_samples(10, 500, seed=0, bootstrap=True) == a  # global RNG state does not matter
    random.random()
    assert draw_samples(10, 500, seed=0, bootstrap=True) == a
    assert draw_samples(10, 500, seed=1, bootstrap=True) != a
    assert draw_samples(10, 50, seed=0, bootstrap=True) == a[:50]  # growing N nests
    assert len(draw_samples(3, 20, seed=0, bootstrap=True)) == 20  # more samples than records is fine


def test_draws_without_replacement():
    ids = draw_samples(100, 30, seed=4, bootstrap=False)
    assert len(ids) == len(set(ids)) == 30 and all(0 <= i < 100 for i in ids)
    every = draw_samples(100, 100, seed=4, bootstrap=False)
    assert sorted(every) == list(range(100))  # exactly once each
    assert every[:30] == ids
    assert draw_samples(100, 30, seed=5, bootstrap=False) != ids
    with pytest.raises(ValueError, match=r"num_samples: 101 > 100 records; without replacement"):
        draw_samples(100, 101, seed=0, bootstrap=False)
    with pytest.raises(ValueError, match=r"num_samples: must be a positive integer"):
        draw_samples(100, 0, seed=0, bootstrap=True)
    with pytest.raises(ValueError, match=r"num_records: must be a positive integer"):
        draw_samples(0, 1, seed=0, bootstrap=True)


def test_sample_ids_hash():
    h = sample_ids_hash([3, 1, 2])
    assert re.fullmatch(r"[0-9a-f]{64}", h)
    assert sample_ids_hash((3, 1, 2)) == h
    assert sample_ids_hash([1, 2, 3]) != h  # order matters: it is the sample sequence


# --------------------------------------------------------------------------- embedded data and configs


def test_embedded_math_demo():
    assert {"math_demo", "nonmath_demo"} <= set(embedded_datasets())
    rows = load_records("embedded://math_demo")
    assert 180 <= len(rows) <= 250 and all(set(r) == {"question", "answer"} for r in rows)
    assert len({r["question"] for r in rows}) == len(rows)
    for r in rows:
        final = re.search(r"\n#### (\d+)$", r["answer"])
        assert final, r["answer"]
        notes = re.findall(r"<<([^=]+)=(\d+)>>", r["answer"])
        assert 2 <= len(notes) <= 4
        for expr, value in notes:  # every calculator note is right (integer arithmetic only)
            assert re.fullmatch(r"[\d+\-*/ ]+", expr)
            assert eval(expr) == int(value), (expr, value)  # noqa: S307 - digits and operators only
        assert notes[-1][1] == final.group(1)  # the last step computes the answer


def test_embedded_nonmath_demo():
    rows = load_records("embedded://nonmath_demo")
    assert 180 <= len(rows) <= 250
    assert all(set(r) >= {"instruction", "response", "qa"} for r in rows)
    assert all(r["qa"] == f"{r['instruction']}\n{r['response']}" for r in rows)
    assert not any(re.search(r"\d", r["qa"]) for r in rows)  # no arithmetic in the non-math set
    assert len({r["instruction"] for r in rows}) == len(rows)


def test_embedded_files_are_small():
    data = ROOT / "src" / "mathneuro" / "data"
    for name in ("math_demo.jsonl", "nonmath_demo.jsonl"):
        assert (data / name).stat().st_size < 300_000


def test_conf_groups_have_the_schema_keys_and_validate():
    for group in ("task", "filter"):
        files = sorted((CONF / group).glob("*.yaml"))
        assert files
        for f in files:
            raw = OmegaConf.to_container(OmegaConf.load(f))
            assert set(raw) == {"name", "path", "subset", "split", "template"}, f
            dataset_conf(group, f.stem).validate(group)


@pytest.mark.parametrize(("group", "name", "starts"), [
    ("task", "embedded_math", "Question: "), ("filter", "embedded_nonmath", "")])
def test_embedded_confs_render(group, name, starts):
    cfg = dataset_conf(group, name)
    records = records_of(cfg, group)
    texts = render(records, cfg.template, key=f"{group}.template")
    assert len(texts) == len(records) and all(t.startswith(starts) for t in texts)
    assert all("{" not in t for t in texts)
    if name == "embedded_math":
        assert "\nAnswer: " in texts[0] and "#### " in texts[0]


def test_hub_confs_render_records_shaped_like_the_hub():
    gsm8k = {"question": "Q?", "answer": "Worked.\n#### 3"}
    math = {"problem": "Find $x$.", "level": "Level 1", "type": "Algebra", "solution": "So $\\boxed{2}$."}
    race = {"example_id": "h1.txt", "article": "Art.", "question": "Why?", "options": ["a", "b", "c", "d"],
            "answer": "C"}
    mmlu = {"question": "Which?", "subject": "x", "choices": ["w", "x", "y", "z"], "answer": 3}
    assert render([gsm8k], dataset_conf("task", "gsm8k").template) == ["Question: Q?\nAnswer: Worked.\n#### 3"]
    assert render([math], dataset_conf("task", "math").template) == ["Problem: Find $x$.\nSolution: So $\\boxed{2}$."]
    assert render([race], dataset_conf("filter", "race").template) == [
        "Art.\n\nQuestion: Why?\nA. a\nB. b\nC. c\nD. d\nAnswer: C. c"]
    assert render([mmlu], dataset_conf("filter", "mmlu").template) == [
        "Question: Which?\nA. w\nB. x\nC. y\nD. z\nAnswer: D. z"]


def test_dataset_config_validate():
    DatasetConfig(name="x", path="a.jsonl", template="{q}").validate("task")
    with pytest.raises(ValueError, match=r"^task\.path: empty"):
        DatasetConfig(name="x", path="", template="{q}").validate("task")
    with pytest.raises(ValueError, match=r"^filter\.name: empty"):
        DatasetConfig(path="p", template="{q}").validate("filter")
    with pytest.raises(ValueError, match=r"^task\.name: 'a/b' must not contain path separators"):
        DatasetConfig(name="a/b", path="p", template="{q}").validate("task")
    with pytest.raises(ValueError, match=r"^task\.template: not a valid format string"):
        DatasetConfig(name="x", path="p", template="{q").validate("task")
    with pytest.raises(ValueError, match=r"^task\.template: empty"):
        DatasetConfig(name="x", path="p").validate("task")
    structured = OmegaConf.structured(DatasetConfig)
    assert set(structured) == {"name", "path", "subset", "split", "template"}


@pytest.mark.slow
def test_shared_benchmark_files_render_with_the_confs():
    shared = ROOT.parent / "shared" / "data"
    if not shared.is_dir():
        pytest.skip("../shared/data is not here")
    cases = [("task", "gsm8k", "gsm8k/train.jsonl"), ("task", "math", "math/test.jsonl"),
             ("filter", "race", "race/validation_high.jsonl"), ("filter", "mmlu", "mmlu/validation_prerelease.jsonl")]
    for group, name, rel in cases:
        cfg = dataset_conf(group, name)
        cfg.path = str(shared / rel)
        texts = render(records_of(cfg, group), cfg.template, key=f"{group}.template")
        assert len(texts) > 100 and all(t.strip() for t in texts)
