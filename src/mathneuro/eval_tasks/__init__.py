"""Local lm-evaluation-harness task YAMLs (``<task>_local``) reading files under a data directory.

Point lm-eval at this folder (``TaskManager(include_path=TASKS_DIR, metadata={"data_dir": ...})``
or ``lm_eval --include_path ... --metadata '{"data_dir": ...}'``); the data directory may also
come from ``$MATHNEURO_DATA_DIR``. Its layout is that of ``../shared/data`` (see the README there).
The ``.py`` modules beside the YAMLs are their ``!function`` helpers.
"""

from pathlib import Path

TASKS_DIR = Path(__file__).resolve().parent
