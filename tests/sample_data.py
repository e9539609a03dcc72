"""A tiny data directory in the layout of ``../shared/data``, written from made-up records.

For offline tests and smoke runs of the local tasks (``eval.data_dir=<dir>``): every file that a
local task reads, each with a few short records whose answers are known. Never real benchmark data.
"""

from __future__ import annotations

import json
from pathlib import Path

from mathneuro.evaluation.task_table import MATH_SUBSETS, MMLU_SUBJECTS


def _write(path: Path, records: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as fh:
        for r in records:
            fh.write(json.dumps(r) + "\n")


def _gsm(n: int, offset: int) -> list[dict]:
    out = []
    for i in range(n):
        a, b = 2 + i + offset, 3 + 2 * i
        out.append({"question": f"Tom has {a} pens and buys {b} more. How many pens does he have?",
                    "answer": f"Tom has {a} + {b} = <<{a}+{b}={a + b}>>{a + b} pens.\n#### {a + b}"})
    return out


def write_sample_data(root: str | Path, per_file: int = 3) -> Path:
    """Write the sample data directory under ``root`` (created) and return it."""
    root = Path(root)
    _write(root / "gsm8k/train.jsonl", _gsm(per_file + 2, 10))
    _write(root / "gsm8k/test.jsonl", _gsm(per_file, 0))
    math_records = []
    for typ in MATH_SUBSETS.values():
        for i in range(per_file):
            math_records.append({"problem": f"What is ${i} + {i + 1}$? ({typ})", "level": "Level 1", "type": typ,
                                 "solution": f"We add: ${i} + {i + 1} = \\boxed{{{2 * i + 1}}}$."})
    _write(root / "math/test.jsonl", math_records)
    math500 = [(r"\frac{1}{2}", "Prealgebra"), (r"(3, -1)", "Algebra"), (r"2\sqrt{2}", "Geometry"),
               (r"[0, 5)", "Intermediate Algebra")]
    _write(root / "math500/test.jsonl", [
        {"problem": f"Problem {i}: state ${answer}$.", "solution": f"It is $\\boxed{{{answer}}}$.", "answer": answer,
         "subject": subject, "level": 1 + i % 5, "unique_id": f"test/{subject.lower()}/{i}.json"}
        for i, (answer, subject) in enumerate(math500[:max(per_file, 1) + 1])])
    _write(root / "mathqa/test_1000.jsonl", [
        {"Problem": f"what is {i} plus {i} ?", "Rationale": f"\"{i} + {i} = {2 * i} answer : b\"",
         "options": f"a ) {2 * i + 1} , b ) {2 * i} , c ) {2 * i + 2} , d ) {2 * i + 3} , e ) {2 * i + 4}",
         "correct": "b", "annotated_formula": f"add({i}, {i})", "linear_formula": "add(n0,n1)|",
         "category": "general"} for i in range(per_file)])
    _write(root / "egsm/egsm_full.jsonl", [
        {"question": f"A box holds {i + 2} balls. How many balls are in 3 boxes?",
         "solution": f"def solution():\n    result = 3 * {i + 2}\n    return result", "answer": f"{3 * (i + 2)}.0",
         "topic": "balls"} for i in range(per_file)]
        + [{"question": "Give two numbers.", "solution": "def solution():\n    return (1, 2)", "answer": "(1, 2)",
            "topic": "pairs"}])
    articles = []
    for i in range(per_file):
        problems = [
            {"answer": "B", "options": ["red", "blue", "green", "black"], "question": "What color is the sky?"},
            {"answer": "A", "options": ["a dog", "a cat", "a bird", "a fish"], "question": "Sam's pet is   _  ."},
            {"answer": "C", "options": ["one", "two", "three", "four"],
             "question": f"How many cats are there in story {i}?"},
        ]
        articles.append({"example_id": f"high{i}.txt",
                         "article": f"Story {i}. The sky is blue. Sam has a dog and three cats.",
                         "problems": repr(problems)})
    _write(root / "race/test_high_by_article.jsonl", articles)
    for subject in MMLU_SUBJECTS:
        for split in ("test", "dev"):
            _write(root / f"mmlu/by_subject/{subject}_{split}.jsonl", [
                {"question": f"{split} question {i} about {subject.replace('_', ' ')}?", "subject": subject,
                 "choices": [f"w{i}", f"x{i}", f"y{i}", f"z{i}"], "answer": i % 4} for i in range(per_file)])
    _write(root / "hellaswag/validation.jsonl", [
        {"ind": i, "activity_label": "Making tea", "ctx": f"A person boils water [step] {i}. they",
         "query": f"Making tea: A person boils water [step] {i}. they",
         "endings": ["pour it in a cup.", "eat the kettle.", "fly away.", "paint the wall [title] red."],
         "label": 0} for i in range(per_file)])
    _write(root / "piqa/validation.jsonl", [
        {"goal": f"How do I open a jar ({i})?", "sol1": "Twist the lid.", "sol2": "Freeze the jar.", "label": 0}
        for i in range(per_file)])
    _write(root / "winogrande/validation.jsonl", [
        {"sentence": f"The cup did not fit in the box {i} because the _ was too big.", "option1": "cup",
         "option2": "box", "answer": "1"} for i in range(per_file)])
    _write(root / "wikitext2/test.jsonl", [
        {"page": f" = Article {i} = \n The river is 10 @,@ 000 km long , and it is well @-@ known . \n"}
        for i in range(per_file)])
    for folder in ("mutual", "mutual_plus"):
        dialogue = [{"answers": "B", "id": f"dev_{i}",
                     "article": "m : hi , how are you ? f : i 'm fine , thanks .",
                     "options": ["m : i do n't like rain .", "m : good to hear that .", "m : it is noon .",
                                 "m : the bus is late ."]} for i in range(per_file)]
        _write(root / f"{folder}/validation.jsonl", dialogue)
        _write(root / f"{folder}/train_first500.jsonl", dialogue)
    return root
