"""``custom_dataset`` loader of the local tasks: JSONL files under the data directory -> a ``DatasetDict``.

lm-eval calls ``load(**metadata, **dataset_kwargs)``; ``dataset_kwargs`` names the files per split
(``files: {test: gsm8k/test.jsonl}``) and may keep only records whose fields equal given values
(``where: {type: Algebra}``). The data directory is ``data_dir`` from the task metadata (passed
to the ``TaskManager``), else ``$MATHNEURO_DATA_DIR``. Records are read in file order, in memory:
nothing reaches the Hub or the ``datasets`` cache.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import datasets

from mathneuro.data.datasets import read_jsonl
from mathneuro.evaluation.task_table import DATA_DIR_ENV


def data_root(data_dir: str | None = None) -> Path:
    """The data directory: ``data_dir``, else ``$MATHNEURO_DATA_DIR``; raises if neither names a folder."""
    value = data_dir or os.environ.get(DATA_DIR_ENV)
    if not value:
        raise ValueError(f"local eval task: no data directory; set eval.data_dir or ${DATA_DIR_ENV} "
                         "(a folder laid out like ../shared/data)")
    root = Path(value).expanduser().resolve()
    if not root.is_dir():
        raise ValueError(f"local eval task: data directory {str(root)!r} does not exist")
    return root


def read_records(path: Path, where: dict[str, Any] | None = None) -> list[dict]:
    """The JSON records of one .jsonl file, keeping those whose fields equal ``where``'s values."""
    if not path.is_file():
        raise FileNotFoundError(f"local eval task: missing data file {str(path)!r} (layout of ../shared/data)")
    records = read_jsonl(path, "local eval task")
    if where:
        records = [r for r in records if all(r.get(k) == v for k, v in where.items())]
    return records


def load(files: dict[str, str], where: dict[str, Any] | None = None, data_dir: str | None = None,
         **_metadata: Any) -> datasets.DatasetDict:
    """One ``Dataset`` per split named in ``files`` (paths relative to the data directory)."""
    root = data_root(data_dir)
    return datasets.DatasetDict(
        {split: datasets.Dataset.from_list(read_records(root / rel, where)) for split, rel in files.items()}
    )
