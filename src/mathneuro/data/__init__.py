"""Stage 1, data: dataset records (local .jsonl/.csv, the Hub, the embedded demo sets), text
templates and the seeded sample draws that identification reads (:mod:`~mathneuro.data.datasets`)."""

from mathneuro.util.exports import lazy_exports

__all__, __getattr__, __dir__ = lazy_exports(__name__, {
    "mathneuro.data.datasets": (
        "DATA_SUFFIXES", "DERIVED_FIELDS", "EMBEDDED_DATA_SCHEME", "LETTERS", "DatasetConfig", "draw_samples",
        "embedded_datasets", "load_records", "read_jsonl", "render", "sample_ids_hash", "template_fields",
    ),
})
