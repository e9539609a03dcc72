"""Stage 6, pipeline: one sweep point end to end. :mod:`~mathneuro.pipeline.config` (structured configs),
:mod:`~mathneuro.pipeline.preflight` (checks before any model loads), :mod:`~mathneuro.pipeline.workbench`
(the loaded model and what points reuse), :mod:`~mathneuro.pipeline.runner` (:func:`run_point`),
:mod:`~mathneuro.results.schema` (the ``results.json`` schema), :mod:`~mathneuro.cli.run` (the
``mathneuro`` command). Nothing here imports the report layer."""
