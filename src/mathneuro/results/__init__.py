"""Stage 6, results: what a sweep point leaves behind, and the one way to write and read it.

:mod:`~mathneuro.results.schema` (``results.json``: :class:`PointResult`, its flat row, the point's
identity fields), :mod:`~mathneuro.results.provenance` (which code made a number),
:mod:`~mathneuro.results.recording` (the point's W&B run), :mod:`~mathneuro.results.wandb_layout`
(groups, names, tags) and :mod:`~mathneuro.results.wandb_point` (what a point logs). The pipeline
writes through this package and the report reads through it; it imports neither.
"""
