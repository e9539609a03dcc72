"""Identification data: records from files, the Hub or our embedded demo sets; text templates; sample draws.

A dataset config (``DatasetConfig``: name, path, subset, split, template) names where the records
are and how one record becomes one text. ``path`` may be

* a local ``.jsonl`` / ``.json`` / ``.csv`` / ``.tsv`` / ``.parquet`` file (any field names;
  ``subset`` and ``split`` are ignored for a single file),
* a local folder: a ``datasets.save_to_disk`` folder, or a folder of data files, one of which
  is picked by ``split`` (the file whose stem equals the split) or is the only one,
* ``embedded://math_demo`` / ``embedded://nonmath_demo``: the demo sets shipped in the package,
* a Hugging Face Hub dataset id, loaded with ``datasets.load_dataset(path, subset, split=split)``.

Templates are Python format strings over a record's fields. Multiple-choice records get derived
fields too (a record's own field of the same name always wins):

* ``options_lettered`` / ``choices_lettered``: the ``options`` / ``choices`` list as
  ``"A. ...\\nB. ..."`` (RACE, MMLU; ARC-style ``{"text": [...], "label": [...]}`` works too);
* ``answer_letter``: the answer as a letter (``answer`` given as a letter or a 0-based index);
* ``answer_text``: the text of the correct option.
"""

from __future__ import annotations

import csv
import hashlib
import importlib.resources
import io
import json
import random
import string
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

EMBEDDED_DATA_SCHEME = "embedded://"
DATA_SUFFIXES = (".jsonl", ".json", ".csv", ".tsv", ".parquet")
LETTERS = string.ascii_uppercase
DERIVED_FIELDS = ("options_lettered", "choices_lettered", "answer_letter", "answer_text")


# --------------------------------------------------------------------------- config


@dataclass
class DatasetConfig:
    """One identification dataset (the ``task`` or the ``filter`` config group); OmegaConf-compatible."""

    name: str = ""  # short name used in results, e.g. gsm8k, race
    path: str = ""  # file, folder, embedded://<name> or Hub id
    subset: str | None = None  # Hub dataset config name (e.g. "main" for gsm8k, "all" for race/mmlu)
    split: str | None = None  # Hub split, or the file stem inside a local folder
    template: str = ""  # Python format string over the record's fields

    def validate(self, key: str) -> None:
        """Check what can be checked without loading: non-empty name/path, a valid named-field template."""
        if not str(self.name or "").strip():
            raise ValueError(f"{key}.name: empty; give a short name such as gsm8k or race")
        if any(ch in str(self.name) for ch in "/\\"):
            raise ValueError(f"{key}.name: {self.name!r} must not contain path separators")
        if not str(self.path or "").strip():
            raise ValueError(f"{key}.path: empty; give a file, a folder, embedded://<name> or a Hub dataset id")
        template_fields(self.template, key=f"{key}.template")


# --------------------------------------------------------------------------- loading


def embedded_datasets() -> list[str]:
    """Names usable as ``embedded://<name>``."""
    folder = importlib.resources.files("mathneuro") / "data"
    try:
        return sorted(p.name[: -len(".jsonl")] for p in folder.iterdir() if p.name.endswith(".jsonl"))
    except (FileNotFoundError, NotADirectoryError):
        return []


def read_text(path: str | Path, key: str = "file") -> str:
    """The UTF-8 text of a data file; bytes that are not UTF-8 are a ValueError naming ``key``, the file,
    the line and the column (``'utf-8' codec can't decode byte 0xe9 in position 1324`` names neither)."""
    data = Path(path).read_bytes()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        column = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
        raise ValueError(f"{key}: {path}:{line}: not UTF-8 text (byte 0x{data[exc.start]:02x} at column {column}); "
                         "save the file as UTF-8") from None


def read_jsonl(path: str | Path, key: str = "file") -> list[Any]:
    """The records of a JSON-lines file (blank lines skipped); a bad line (not JSON, not UTF-8) is a
    ValueError naming ``key``, the file and the line."""
    rows = []
    for lineno, line in enumerate(io.StringIO(read_text(path, key), newline=None), 1):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError as exc:
            raise ValueError(f"{key}: {path}:{lineno}: not valid JSON ({exc.msg})") from None
    return rows


def _read_json(path: Path, split: str | None, key: str) -> list[Any]:
    text = read_text(path, key)
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        return read_jsonl(path, key)  # JSON lines saved as .json
    if isinstance(data, list):
        return data
    if isinstance(data, dict):
        lists = {k: v for k, v in data.items() if isinstance(v, list)}
        if split is not None and split in lists:
            return lists[split]
        if len(lists) == 1:
            return next(iter(lists.values()))
        if all(not isinstance(v, (list, dict)) for v in data.values()):
            return [data]
        raise ValueError(f"{key}: {path} holds several lists ({', '.join(lists)}); pick one with split")
    raise ValueError(f"{key}: {path} must hold a list of records")


def _read_file(path: Path, split: str | None, key: str) -> list[Any]:
    suffix = path.suffix.lower()
    if suffix == ".jsonl":
        return read_jsonl(path, key)
    if suffix == ".json":
        return _read_json(path, split, key)
    if suffix in (".csv", ".tsv"):
        text = io.StringIO(read_text(path, key), newline="")
        return list(csv.DictReader(text, delimiter="\t" if suffix == ".tsv" else ","))
    if suffix == ".parquet":
        import datasets

        return datasets.load_dataset("parquet", data_files=str(path), split="train").to_list()
    raise ValueError(f"{key}: {path} has an unsupported suffix; allowed: {', '.join(DATA_SUFFIXES)}")


def _from_hf(obj: Any, split: str | None, where: str, key: str) -> list[Any]:
    """Records of a datasets.Dataset, or of one split of a DatasetDict."""
    if hasattr(obj, "keys") and not hasattr(obj, "to_list"):  # DatasetDict
        splits = list(obj.keys())
        if split is None:
            if len(splits) != 1:
                raise ValueError(f"{key}: {where} has splits {', '.join(splits)}; pick one with split")
            split = splits[0]
        if split not in obj:
            raise ValueError(f"{key}: {where} has no split {split!r}; available: {', '.join(splits)}")
        obj = obj[split]
    return obj.to_list()


def _read_dir(path: Path, split: str | None, key: str) -> list[Any]:
    if (path / "dataset_dict.json").is_file() or (path / "state.json").is_file():
        import datasets

        return _from_hf(datasets.load_from_disk(str(path)), split, str(path), key)
    files = sorted(p for p in path.iterdir() if p.is_file() and p.suffix.lower() in DATA_SUFFIXES)
    if split is not None:
        chosen = [p for p in files if p.stem == split]
        if not chosen:
            names = ", ".join(p.name for p in files) or "none"
            raise ValueError(f"{key}: {path} has no data file named {split}.<ext> for split {split!r}; files: {names}")
    elif len(files) == 1:
        chosen = files
    else:
        names = ", ".join(p.name for p in files) or "none"
        raise ValueError(f"{key}: {path} must hold exactly one data file, or name one with split; files: {names}")
    return _read_file(chosen[0], split, key)


def _looks_local(text: str) -> bool:
    if text.startswith(("/", "./", "../", "~", ".\\")) or text in (".", ".."):
        return True
    return text.lower().endswith(DATA_SUFFIXES) or text.count("/") > 1 or "\\" in text


def load_records(
    path: str,
    *,
    split: str | None = None,
    name: str | None = None,
    data_files: str | Sequence[str] | Mapping[str, Any] | None = None,
    key: str = "path",
) -> list[dict]:
    """Load a dataset as a list of dicts (see the module docstring for what ``path`` may be).

    ``name`` is the Hub dataset config (subset); ``data_files`` is passed to
    ``datasets.load_dataset`` (e.g. ``path="json", data_files={"train": "a.jsonl"}``). Errors are
    ValueErrors prefixed with ``key`` (e.g. ``task.path``).
    """
    text = str(path or "").strip()
    if not text:
        raise ValueError(f"{key}: empty; give a file, a folder, embedded://<name> or a Hub dataset id")
    if text.startswith(EMBEDDED_DATA_SCHEME):
        dataset = text[len(EMBEDDED_DATA_SCHEME):]
        available = embedded_datasets()
        if dataset not in available:
            raise ValueError(f"{key}: unknown embedded dataset {text!r}; available: "
                             + ", ".join(EMBEDDED_DATA_SCHEME + n for n in available))
        resource = importlib.resources.files("mathneuro") / "data" / f"{dataset}.jsonl"
        with importlib.resources.as_file(resource) as file:
            rows = read_jsonl(Path(file), key)
        where = text
    elif data_files is None and Path(text).expanduser().exists():
        local = Path(text).expanduser()
        rows = _read_dir(local, split, key) if local.is_dir() else _read_file(local, split, key)
        where = str(local)
    elif data_files is None and _looks_local(text):
        raise ValueError(f"{key}: file not found: {text!r} (resolved to {Path(text).expanduser().resolve()})")
    else:
        import datasets

        try:
            loaded = datasets.load_dataset(text, name, split=split, data_files=data_files)
        except Exception as exc:  # network, missing dataset, bad subset: all need the same advice
            raise ValueError(
                f"{key}: could not load {text!r} (subset={name!r}, split={split!r}) with datasets.load_dataset: "
                f"{type(exc).__name__}: {exc}. Offline, point {key} at a local .jsonl/.csv file instead."
            ) from exc
        rows = _from_hf(loaded, split, text, key)
        where = f"{text} (subset={name}, split={split})"
    if not rows:
        raise ValueError(f"{key}: {where} has no records")
    for index, row in enumerate(rows):
        if not isinstance(row, dict):
            raise ValueError(f"{key}: {where}: record {index} is a {type(row).__name__}, not an object with fields")
    return rows


# --------------------------------------------------------------------------- templates


def template_fields(template: str, *, key: str = "template") -> list[str]:
    """The top-level field names a template uses (``{a.b}`` and ``{a[0]}`` count as ``a``).

    Raises ValueError for an empty or malformed template, or positional fields like ``{}``.
    """
    if not isinstance(template, str) or not template:
        raise ValueError(f"{key}: empty; give a format string such as '{{question}}\\n{{answer}}'")
    fields: list[str] = []
    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError as exc:
        raise ValueError(f"{key}: not a valid format string ({exc}); write literal braces as {{{{ and }}}}") from None
    for _, field, spec, _ in parsed:
        if field is None:
            continue
        top = field.split(".", 1)[0].split("[", 1)[0]
        if not top or top.isdigit():
            raise ValueError(f"{key}: positional field {{{field}}} not allowed; name a record field, e.g. {{question}}")
        if spec and "{" in spec:
            template_fields(spec, key=key)
        if top not in fields:
            fields.append(top)
    return fields


def _option_list(value: Any) -> tuple[list[str], list[str]] | None:
    """(labels, texts) of a multiple-choice field: a list, or {"text": [...], "label": [...]}."""
    if isinstance(value, Mapping) and isinstance(value.get("text"), list):
        texts = [str(t) for t in value["text"]]
        labels = [str(x) for x in value.get("label", LETTERS[: len(texts)])]
        return labels, texts
    if isinstance(value, (list, tuple)):
        texts = [str(t) for t in value]
        return list(LETTERS[: len(texts)]), texts
    return None


def _answer_index(answer: Any, labels: list[str]) -> int | None:
    if isinstance(answer, bool):
        return None
    if isinstance(answer, int):
        return answer if 0 <= answer < len(labels) else None
    text = str(answer).strip()
    if text in labels:
        return labels.index(text)
    if text.isdigit() and 0 <= int(text) < len(labels):
        return int(text)
    return None


def _derived(record: Mapping[str, Any], wanted: Iterable[str]) -> dict[str, str]:
    """The derived multiple-choice fields of ``record`` that ``wanted`` asks for and the data allows."""
    out: dict[str, str] = {}
    wanted = [w for w in wanted if w in DERIVED_FIELDS and w not in record]
    if not wanted:
        return out
    lists = {f: _option_list(record[f]) for f in ("options", "choices") if f in record}
    lists = {f: v for f, v in lists.items() if v is not None}
    for field, (labels, texts) in lists.items():
        out[f"{field}_lettered"] = "\n".join(f"{label}. {text}" for label, text in zip(labels, texts, strict=False))
    if lists and "answer" in record:
        labels, texts = next(iter(lists.values()))
        index = _answer_index(record["answer"], labels)
        if index is not None:
            out["answer_letter"] = labels[index]
            out["answer_text"] = texts[index]
    return {k: v for k, v in out.items() if k in wanted}


def render(records: Sequence[Mapping[str, Any]], template: str, *, key: str = "template") -> list[str]:
    """Format every record with ``template`` (a Python format string over its fields, plus derived fields).

    A field missing from a record raises ValueError naming ``key``, the field and the fields available.
    """
    fields = template_fields(template, key=key)
    texts = []
    for index, record in enumerate(records):
        view = dict(record)
        view.update(_derived(record, fields))
        missing = [f for f in fields if f not in view]
        if missing:
            available = ", ".join(record.keys())
            derivable = [d for d in DERIVED_FIELDS if d in _derived(record, DERIVED_FIELDS)]
            extra = f" (derived: {', '.join(derivable)})" if derivable else ""
            where = "" if index == 0 else f" (record {index})"
            raise ValueError(f"{key}: field {missing[0]!r} not in the data{where}; available: {available}{extra}")
        try:
            texts.append(template.format_map(view))
        except (KeyError, IndexError, AttributeError, TypeError, ValueError) as exc:
            raise ValueError(f"{key}: cannot format record {index}: {type(exc).__name__}: {exc}") from None
    return texts


# --------------------------------------------------------------------------- sample draws


def draw_samples(num_records: int, num_samples: int, seed: int, bootstrap: bool) -> list[int]:
    """Indices of the records to use: seeded, deterministic, independent of any global RNG.

    ``bootstrap``: with replacement (as in the paper). Otherwise without replacement, so
    ``num_samples <= num_records``; ``num_samples == num_records`` uses every record once. With one
    seed, a draw of n is the first n of any larger draw (both modes), so growing N nests samples.
    """
    if int(num_records) != num_records or num_records < 1:
        raise ValueError(f"num_records: must be a positive integer, got {num_records!r}")
    if int(num_samples) != num_samples or num_samples < 1:
        raise ValueError(f"num_samples: must be a positive integer, got {num_samples!r}")
    num_records, num_samples = int(num_records), int(num_samples)
    rng = random.Random(int(seed))
    if bootstrap:
        return [rng.randrange(num_records) for _ in range(num_samples)]
    if num_samples > num_records:
        raise ValueError(
            f"num_samples: {num_samples} > {num_records} records; without replacement (bootstrap=false) "
            f"at most {num_records} can be drawn; lower num_samples or set bootstrap=true"
        )
    order = list(range(num_records))
    rng.shuffle(order)
    return order[:num_samples]


def sample_ids_hash(ids: Iterable[int]) -> str:
    """sha256 (hex) of the ordered list of drawn record indices."""
    payload = json.dumps([int(i) for i in ids], separators=(",", ":"))
    return hashlib.sha256(payload.encode()).hexdigest()
