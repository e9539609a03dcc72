"""A probe that holds an evaluation until the test opens its gate, so a test can act mid-evaluation at a
moment it knows (registered on import; named in ``eval.tasks`` as ``tests.slurm.gate:gate``).

The gate is the folder ``$MATHNEURO_TEST_GATE``: the probe writes ``entered-<pid>`` there, then waits for
a file ``open``. The wait is a Python loop, so a timeout's signal (USR2, handled by submitit) ends it at once.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from mathneuro.evaluation.probe_registry import register_probe

GATE_ENV = "MATHNEURO_TEST_GATE"


@register_probe("slurm_test_gate", kind="nonmath", replace=True)
def gate(ctx) -> dict[str, float]:
    folder = Path(os.environ[GATE_ENV])
    (folder / f"entered-{os.getpid()}").touch()
    while not (folder / "open").exists():
        time.sleep(0.1)
    return {"passed": 1.0}
