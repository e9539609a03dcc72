"""Stage 7, pipeline: one sweep point end to end. :mod:`~mathneuro.pipeline.config` (structured configs),
:mod:`~mathneuro.pipeline.preflight` (checks before any model loads), :mod:`~mathneuro.pipeline.workbench`
(the loaded model and what points reuse), :mod:`~mathneuro.pipeline.runner` (:func:`run_point`). It writes
its results through :mod:`mathneuro.results`; the ``mathneuro`` command is :mod:`mathneuro.cli.run`.
Nothing here imports the report layer."""
