"""Built-in probes: fast math and non-math signals without lm-evaluation-harness.

- ``arith``: exact match on generated ``a <op> b =`` problems (greedy, batched, stop at newline).
- ``gsm8k_gen``: an alias of lm-eval's ``gsm8k_cot`` (the paper's metric) on the probe's problem
  file; it runs through the harness (:mod:`mathneuro.evaluation.gsm8k_alias`), not here.
- ``mc``: multiple-choice accuracy by log-likelihood (lm-eval's ``acc`` and ``acc_norm``).
- ``ppl``: perplexity of a text set (token, word, byte; bits per byte).

Each returns ``{metric: value}`` with lm-eval's metric names and ``<metric>_stderr`` where one exists.
``arith`` and ``mc`` also score example by example (:func:`score_arith`, :func:`score_mc`): one record
``{"doc_id": i, "<metric>": 0/1, ...}`` per problem, the mean of a column being the reported metric,
in the format of lm-eval's per-example records (:mod:`mathneuro.evaluation.samples`), so that
``eval.log_samples`` pairs probe scores across sweep points like any harness task's.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from mathneuro.data.datasets import read_jsonl
from mathneuro.evaluation.answers import extract_integer
from mathneuro.evaluation.config import ArithConfig, GenerationProbeConfig
from mathneuro.evaluation.generation import greedy_generate
from mathneuro.evaluation.likelihood import loglikelihoods, rolling_loglikelihoods
from mathneuro.evaluation.samples import hash_doc, hash_text, prompt_excerpt
from mathneuro.evaluation.task_table import probe_data_dir

MC_FILE = "multiple_choice.jsonl"
TEXT_FILE = "text.txt"
WORD_PROBLEMS_FILE = "word_problems.jsonl"


def mean_stderr(values: Sequence[float]) -> float:
    """Standard error of the mean with Bessel's correction (lm-eval's ``mean_stderr``); 0 for n < 2."""
    n = len(values)
    if n < 2:
        return 0.0
    mu = sum(values) / n
    return math.sqrt(sum((v - mu) ** 2 for v in values) / (n - 1) / n)


def _mean_metric(name: str, values: Sequence[float]) -> dict[str, float]:
    return {name: sum(values) / len(values), f"{name}_stderr": mean_stderr(values)}


def mean_metrics(records: Sequence[dict], names: Sequence[str]) -> dict[str, float]:
    """Each named column's mean over per-example ``records`` and its ``<name>_stderr``."""
    if not records:
        raise ValueError("no examples were scored")
    out: dict[str, float] = {}
    for name in names:
        out.update(_mean_metric(name, [float(r[name]) for r in records]))
    return out


def apply_limit(items: list, limit: float | int | None) -> list:
    """The first ``limit`` items (a fraction of them if ``limit`` < 1); all if None."""
    if limit is None:
        return items
    n = int(limit) if limit >= 1 else int(math.ceil(len(items) * limit))
    return items[:n]


# --------------------------------------------------------------------------- arithmetic


@dataclass(frozen=True)
class ArithProblem:
    """One arithmetic problem: the prompt line ``"a op b ="`` and its integer answer."""

    a: int
    op: str
    b: int

    @property
    def prompt(self) -> str:
        return f"{self.a} {self.op} {self.b} ="

    @property
    def answer(self) -> int:
        if self.op == "+":
            return self.a + self.b
        if self.op == "-":
            return self.a - self.b
        return self.a * self.b


def arith_problems(cfg: ArithConfig) -> tuple[list[ArithProblem], list[ArithProblem]]:
    """``(examples, problems)`` drawn from a private ``random.Random(cfg.seed)``: deterministic, global RNG
    untouched."""
    rng = random.Random(cfg.seed)
    low = 0 if cfg.digits == 1 else 10 ** (cfg.digits - 1)
    high = 10 ** cfg.digits - 1

    def draw() -> ArithProblem:
        return ArithProblem(rng.randint(low, high), rng.choice(list(cfg.operations)), rng.randint(low, high))

    examples = [draw() for _ in range(cfg.num_fewshot)]
    problems = [draw() for _ in range(cfg.num_problems)]
    return examples, problems


def arith_prefix(examples: Sequence[ArithProblem]) -> str:
    """The few-shot prefix: one solved problem per line."""
    return "".join(f"{p.prompt} {p.answer}\n" for p in examples)


def score_arith(model: torch.nn.Module, tokenizer, cfg: ArithConfig, *, batch_size: int = 8,
                progress: bool = False) -> list[dict]:
    """One record per problem: ``{"doc_id", "exact_match", "answer", "target"}``; ``answer`` is the
    first integer the model writes after ``"a op b ="`` (greedy, stop at newline), "" when none."""
    examples, problems = arith_problems(cfg)
    outputs = greedy_generate(model, tokenizer, [p.prompt for p in problems], prefix=arith_prefix(examples),
                              max_new_tokens=cfg.max_new_tokens, stop=("\n",), batch_size=batch_size,
                              progress=progress, desc="arith")
    records = []
    prefix = arith_prefix(examples)
    for i, (output, problem) in enumerate(zip(outputs, problems, strict=True)):
        answer = extract_integer(output)
        records.append({"doc_id": i, "exact_match": float(answer == problem.answer),
                        "answer": "" if answer is None else str(answer), "target": str(problem.answer),
                        "doc_hash": hash_text(problem.prompt), "prompt_hash": hash_text(prefix + problem.prompt),
                        "prompt": prompt_excerpt(prefix + problem.prompt)})
    return records


def arith_probe(model: torch.nn.Module, tokenizer, cfg: ArithConfig, *, batch_size: int = 8,
                progress: bool = False) -> dict[str, float]:
    """Exact match of the first integer the model writes after ``"a op b ="`` (greedy, stop at newline)."""
    return mean_metrics(score_arith(model, tokenizer, cfg, batch_size=batch_size, progress=progress),
                        ("exact_match",))


# --------------------------------------------------------------------------- GSM8K problems (gsm8k_gen)


def gsm8k_prompt(question: str) -> str:
    """lm-eval's ``gsm8k_cot`` question format."""
    return f"Q: {question}\nA:"


def gsm8k_prefix(exemplars: Sequence[dict], num_fewshot: int) -> str:
    """``num_fewshot`` worked examples in lm-eval's ``gsm8k_cot`` format, each followed by a blank line."""
    return "".join(f"{gsm8k_prompt(e['question'])} {e['target']}\n\n" for e in exemplars[:num_fewshot])


def gsm8k_file(cfg: GenerationProbeConfig, data_dir: Path | None) -> Path:
    """The problems of ``gsm8k_gen``: ``cfg.file``, else ``<data_dir>/gsm8k/test.jsonl``, else our word problems."""
    if cfg.file:
        return Path(cfg.file).expanduser()
    if data_dir is not None and (data_dir / "gsm8k" / "test.jsonl").is_file():
        return data_dir / "gsm8k" / "test.jsonl"
    return probe_data_dir() / WORD_PROBLEMS_FILE


def gsm8k_records(cfg: GenerationProbeConfig, data_dir: Path | None) -> list[dict]:
    """The records of :func:`gsm8k_file`. ``gsm8k_gen`` itself runs lm-eval's ``gsm8k_cot`` on them
    (:mod:`mathneuro.evaluation.gsm8k_alias`)."""
    return read_jsonl(gsm8k_file(cfg, data_dir))


# --------------------------------------------------------------------------- multiple choice


def mc_records(path: str | None) -> list[dict]:
    """Multiple-choice records ``{question, choices, answer}`` from ``path``, else our shipped file."""
    records = read_jsonl(Path(path).expanduser() if path else probe_data_dir() / MC_FILE)
    for i, r in enumerate(records):
        if not (isinstance(r.get("choices"), list) and isinstance(r.get("answer"), int)
                and 0 <= r["answer"] < len(r["choices"])):
            raise ValueError(f"eval.mc.file: record {i} needs 'question', 'choices' (list), 'answer' (index)")
    return records


def mc_prompt(question: str) -> str:
    """The context of a multiple-choice question; each choice follows after a space."""
    return f"Question: {question}\nAnswer:"


def score_mc(model: torch.nn.Module, tokenizer, records: Sequence[dict], *, batch_size: int = 8,
             progress: bool = False) -> list[dict]:
    """One record per question: ``{"doc_id", "acc", "acc_norm", "answer", "target", "doc_hash",
    "prompt_hash"}`` (``acc``: the highest log-likelihood choice is right; ``acc_norm``: the same per
    byte of the choice; ``answer``: the text of the ``acc`` choice, ``target`` that of the right one)."""
    requests, owners = [], []
    for i, r in enumerate(records):
        for choice in r["choices"]:
            requests.append((mc_prompt(r["question"]), f" {choice}"))
            owners.append(i)
    scores = loglikelihoods(model, tokenizer, requests, batch_size=batch_size, progress=progress, desc="mc")
    per_record: list[list[tuple[float, int]]] = [[] for _ in records]
    for (_, cont), owner, score in zip(requests, owners, scores, strict=True):
        per_record[owner].append((score, len(cont.encode("utf-8"))))
    scored = []
    for i, (r, options) in enumerate(zip(records, per_record, strict=True)):
        raw = [s for s, _ in options]
        norm = [s / n for s, n in options]
        pick = max(range(len(raw)), key=raw.__getitem__)
        pick_norm = max(range(len(norm)), key=norm.__getitem__)
        scored.append({"doc_id": i, "acc": float(pick == r["answer"]), "acc_norm": float(pick_norm == r["answer"]),
                       "answer": str(r["choices"][pick]), "target": str(r["choices"][r["answer"]]),
                       "doc_hash": hash_doc(r), "prompt_hash": hash_text(mc_prompt(r["question"])),
                       "prompt": prompt_excerpt(mc_prompt(r["question"]))})
    return scored


def mc_probe(model: torch.nn.Module, tokenizer, records: Sequence[dict], *, batch_size: int = 8,
             progress: bool = False) -> dict[str, float]:
    """``acc``: the highest log-likelihood choice is right; ``acc_norm``: the same per byte of the choice."""
    return mean_metrics(score_mc(model, tokenizer, records, batch_size=batch_size, progress=progress),
                        ("acc", "acc_norm"))


# --------------------------------------------------------------------------- perplexity


def text_documents(path: str | None) -> list[str]:
    """Documents of a text set: a .jsonl's ``text`` (or ``page``) fields, or a .txt split at blank lines."""
    source = Path(path).expanduser() if path else probe_data_dir() / TEXT_FILE
    if source.suffix == ".jsonl":
        docs = [str(r.get("text", r.get("page", ""))) for r in read_jsonl(source)]
    else:
        docs = source.read_text(encoding="utf-8").split("\n\n")
    docs = [d.strip() for d in docs if d.strip()]
    if not docs:
        raise ValueError(f"eval.ppl.file: no text in {str(source)!r}")
    return docs


def ppl_probe(model: torch.nn.Module, tokenizer, docs: Sequence[str], *, max_length: int = 512,
              batch_size: int = 8, progress: bool = False) -> dict[str, float]:
    """Perplexities over all documents: per token, per word (whitespace), per byte; and bits per byte."""
    results = rolling_loglikelihoods(model, tokenizer, docs, max_length=max_length, batch_size=batch_size,
                                     progress=progress, desc="ppl")
    total = sum(ll for ll, _ in results)
    tokens = sum(n for _, n in results)
    words = sum(len(d.split()) for d in docs)
    nbytes = sum(len(d.encode("utf-8")) for d in docs)
    return {
        "token_perplexity": math.exp(-total / tokens),
        "word_perplexity": math.exp(-total / words),
        "byte_perplexity": math.exp(-total / nbytes),
        "bits_per_byte": -total / nbytes / math.log(2),
    }


__all__ = [
    "ArithProblem", "arith_prefix", "arith_probe", "arith_problems", "gsm8k_file", "gsm8k_prefix", "gsm8k_prompt",
    "gsm8k_records", "mc_probe", "mc_prompt", "mc_records", "mean_metrics", "mean_stderr", "ppl_probe",
    "score_arith", "score_mc", "text_documents", "apply_limit",
]
