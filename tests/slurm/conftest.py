"""The ``slurm`` tier's cluster: one per test session, started before its first test and stopped after
its last (also when tests fail), daemons by their pids. Run with ``make test-slurm``."""

from __future__ import annotations

import pytest

from tests.slurm.cluster import SlurmCluster, ensure_installed
from tests.slurm.sweeps import fastest_batch, save_medium_model


@pytest.fixture(scope="session")
def slurm_cluster(tmp_path_factory):
    """A running single-node SLURM cluster (its ``env`` holds ``SLURM_CONF``)."""
    ensure_installed()
    cluster = SlurmCluster(tmp_path_factory.mktemp("slurm"), kill_wait=1)  # SIGTERM, then SIGKILL 1 s later
    cluster.start()
    try:
        yield cluster
    finally:
        try:
            cluster.cancel_all()
        finally:
            cluster.stop()


@pytest.fixture(scope="session")
def medium_model(tmp_path_factory):
    """A random llama large enough that a statistics pass takes seconds, saved like a local checkpoint."""
    return save_medium_model(tmp_path_factory.mktemp("medium-llama"))


@pytest.fixture(scope="session")
def fastest_batch_s(medium_model):
    """The medium model's fastest statistics batch here (seconds), to size passes a test acts in."""
    return fastest_batch(medium_model)
