"""Stage 9 (after the report, 8), the command line, on top of everything: :mod:`~mathneuro.cli.run` (``mathneuro``, one
sweep point per Hydra job), :mod:`~mathneuro.cli.report` (``mathneuro-report``, ``mathneuro-overlap``),
:mod:`~mathneuro.cli.callbacks` (Hydra callbacks: the sweep's checks before, its report after) and
:mod:`~mathneuro.cli.sweep_status` (the line a sweep ends with). Nothing below imports this package.
"""
