"""Stage 6, pipeline: one sweep point end to end. :mod:`~mathneuro.pipeline.config` (structured configs),
:mod:`~mathneuro.pipeline.preflight` (checks before any model loads), :mod:`~mathneuro.pipeline.workbench`
(the loaded model and what points reuse), :mod:`~mathneuro.pipeline.runner` (:func:`run_point`),
:mod:`~mathneuro.pipeline.results` (the ``results.json`` schema), :mod:`~mathneuro.pipeline.cli` (the
``mathneuro`` command). Nothing here imports the report layer."""
