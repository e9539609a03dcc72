"""Stage 1, data: dataset records (local .jsonl/.csv, the Hub, the embedded demo sets), text
templates and the seeded sample draws that identification reads (:mod:`~mathneuro.data.datasets`)."""

from mathneuro.data.datasets import (
    DATA_SUFFIXES,
    DERIVED_FIELDS,
    EMBEDDED_DATA_SCHEME,
    LETTERS,
    DatasetConfig,
    draw_samples,
    embedded_datasets,
    load_records,
    read_jsonl,
    render,
    sample_ids_hash,
    template_fields,
)

__all__ = [
    "DATA_SUFFIXES", "DERIVED_FIELDS", "EMBEDDED_DATA_SCHEME", "LETTERS", "DatasetConfig", "draw_samples",
    "embedded_datasets", "load_records", "read_jsonl", "render", "sample_ids_hash", "template_fields",
]
