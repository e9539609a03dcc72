"""``doc_to_*`` and ``process_docs`` helpers of the local tasks (same prompt formats as the stock tasks)."""

from __future__ import annotations

import ast
import re

import datasets

from mathneuro.eval_tasks.scoring import is_number, last_boxed, normalize_math_answer

LETTERS = ("A", "B", "C", "D", "E")

# --------------------------------------------------------------------------- RACE (one row per article)


def _problems(doc: dict) -> list[dict]:
    problems = doc["problems"]
    return ast.literal_eval(problems) if isinstance(problems, str) else list(problems)


def _answer_text(problem: dict) -> str:
    return problem["options"][LETTERS.index(problem["answer"])]


def race_doc_to_text(doc: dict) -> str:
    """The article, its earlier questions answered, then the last question (the one scored)."""
    problems = _problems(doc)
    parts = [f"Article: {doc['article']}\n\n"]
    for p in problems[:-1]:
        question = p["question"]
        if question.endswith("  _  ."):  # a cloze question: fill the blank in place
            parts.append(question[:-5] + _answer_text(p) + "\n")
        else:
            parts.append(f"Question: {question}\nAnswer: {_answer_text(p)}\n")
    parts.append(problems[-1]["question"])
    return "".join(parts)


def race_doc_to_choice(doc: dict) -> list[str]:
    """The four options of the article's last question."""
    return list(_problems(doc)[-1]["options"][:4])


def race_doc_to_target(doc: dict) -> int:
    """The index of the right option of the last question."""
    return LETTERS.index(_problems(doc)[-1]["answer"])


# --------------------------------------------------------------------------- WinoGrande (partial scoring)


def winogrande_doc_to_text(doc: dict) -> int:
    """The index of the right context (lm-eval scores the shared ending after each filled-in context)."""
    return {"1": 0, "2": 1}[str(doc["answer"])]


def winogrande_doc_to_choice(doc: dict) -> list[str]:
    """The sentence up to the blank, filled with each option."""
    cut = doc["sentence"].index("_")
    return [doc["sentence"][:cut] + doc[key] for key in ("option1", "option2")]


def winogrande_doc_to_target(doc: dict) -> str:
    """The sentence after the blank (the part scored)."""
    cut = doc["sentence"].index("_") + 1
    return doc["sentence"][cut:].strip()


# --------------------------------------------------------------------------- HellaSwag


def _clean_hellaswag(text: str) -> str:
    text = text.strip().replace(" [title]", ". ")
    text = re.sub(r"\[.*?\]", "", text)
    return text.replace("  ", " ")


def hellaswag_process_docs(dataset: datasets.Dataset) -> datasets.Dataset:
    """``query`` = activity label + context, ``choices`` = endings, both cleaned of WikiHow markup."""

    def one(doc: dict) -> dict:
        return {
            "query": _clean_hellaswag(f"{doc['activity_label']}: {doc['ctx']}"),
            "choices": [_clean_hellaswag(e) for e in doc["endings"]],
            "gold": int(doc["label"]),
        }

    return dataset.map(one)


# --------------------------------------------------------------------------- MathQA


def mathqa_doc_to_choice(doc: dict) -> list[str]:
    """The five options of ``"a ) 12 , b ) 16 , ... e ) 26"`` without their letters."""
    found = re.findall(r"[abcd] \) .*?, |e \) .*?$", doc["options"])
    return [c[4:].rstrip(" ,") for c in found]


# --------------------------------------------------------------------------- MuTual


def _detok_mutual(text: str) -> str:
    for before, after in ((" '", "'"), (" \n", "\n"), ("\n ", "\n"), (" n't", "n't"), ("`` ", '"'),
                          ("''", '"'), (" :", ":"), (" ;", ";"), (" !", "!"), (" ?", "?"), (" ,", ","),
                          (" .", ".")):
        text = text.replace(before, after)
    return text


def mutual_process_docs(dataset: datasets.Dataset) -> datasets.Dataset:
    """Undo the tokenised spacing of the dialogue and of the options."""
    return dataset.map(lambda d: {"article": _detok_mutual(d["article"]),
                                  "options": [_detok_mutual(o) for o in d["options"]]})


# --------------------------------------------------------------------------- WikiText


def wikitext_doc_to_target(doc: dict) -> str:
    """The page with WikiText's tokenised spacing undone (``@-@``, `` , ``, ``= = =``...)."""
    s = doc["page"]
    s = s.replace("s '", "s'")
    s = re.sub(r"/' [0-9]/", r"/'[0-9]/", s)
    for before, after in ((" @-@ ", "-"), (" @,@ ", ","), (" @.@ ", "."), (" : ", ": "), (" ; ", "; "),
                          (" . ", ". "), (" ! ", "! "), (" ? ", "? "), (" , ", ", ")):
        s = s.replace(before, after)
    for o, c in ("()", "[]", "{}", '""', "''"):  # no spaces just inside brackets and quotes
        pattern = re.escape(o) + r"\s*([^" + re.escape(c) + r"]*?)\s*" + re.escape(c)
        s = re.sub(pattern, lambda m, o=o, c=c: o + m.group(1) + c, s)
    for before, after in (("= = = =", "===="), ("= = =", "==="), ("= =", "=="),
                          (" \N{DEGREE SIGN} ", "\N{DEGREE SIGN}"),
                          (" \n", "\n"), ("\n ", "\n"), (" N ", " 1 "), (" 's", "'s")):
        s = s.replace(before, after)
    return s


# --------------------------------------------------------------------------- MATH and EGSM


def math_process_docs(dataset: datasets.Dataset) -> datasets.Dataset:
    """Add ``gold_latex`` (the solution's last ``\\boxed{}``) and ``answer`` (its normalised form)."""
    def gold(d: dict) -> dict:
        boxed = last_boxed(d["solution"]) or ""
        return {"gold_latex": boxed, "answer": normalize_math_answer(boxed)}

    return dataset.map(gold)


def math500_process_docs(dataset: datasets.Dataset) -> datasets.Dataset:
    """MATH-500 (HuggingFaceH4 layout) already has the final ``answer``: keep it as ``gold_latex``, normalise it."""
    return dataset.map(lambda d: {"gold_latex": str(d["answer"]), "answer": normalize_math_answer(str(d["answer"]))})


def math_doc_to_text(doc: dict) -> str:
    """Minerva's prompt: ``Problem:\\n<problem>\\n\\nSolution:``."""
    return "Problem:\n" + doc["problem"] + "\n\nSolution:"


def egsm_process_docs(dataset: datasets.Dataset) -> datasets.Dataset:
    """Keep the problems whose answer is one number (drops the few tuple / list answers)."""
    return dataset.filter(lambda d: is_number(str(d["answer"])))
