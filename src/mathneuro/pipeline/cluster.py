"""Where a point runs when a scheduler runs it: the SLURM job's identity, for ``results.json``.

:func:`cluster_info` reads it from SLURM's environment (``SLURM_*``): job id, array job id and index,
job name, partition, node and how often SLURM requeued the job.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

# results.json's `cluster` field -> the SLURM variable it comes from
SLURM_FIELDS = {
    "job_id": "SLURM_JOB_ID",
    "array_job_id": "SLURM_ARRAY_JOB_ID",
    "array_task_id": "SLURM_ARRAY_TASK_ID",
    "job_name": "SLURM_JOB_NAME",
    "partition": "SLURM_JOB_PARTITION",
    "node": "SLURMD_NODENAME",
}


def cluster_info(env: Mapping[str, str] | None = None) -> dict[str, Any] | None:
    """``{"scheduler": "slurm", "job_id", "array_job_id", "array_task_id", "restart_count", ...}`` inside a
    SLURM job (ids as strings, ``restart_count``: how often SLURM requeued the job), None outside one."""
    env = os.environ if env is None else env
    if not env.get("SLURM_JOB_ID"):
        return None
    info: dict[str, Any] = {"scheduler": "slurm"}
    info.update({key: env[var] for key, var in SLURM_FIELDS.items() if env.get(var)})
    try:
        info["restart_count"] = int(env.get("SLURM_RESTART_COUNT") or 0)
    except ValueError:
        info["restart_count"] = 0
    return info
