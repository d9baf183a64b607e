"""`make_cluster(n)`: n simulated hosts (harness.py), torn down when the test ends, however it ends;
skipped with the reason where namespaces cannot be made (not root, no util-linux)."""
from __future__ import annotations

import pytest
from harness import Cluster, unavailable


@pytest.fixture
def make_cluster():
    yield from _clusters()


@pytest.fixture(scope="module")
def make_module_cluster():
    """make_cluster for a module's fixtures (hosts shared by the module's tests)."""
    yield from _clusters()


def _clusters():
    reason = unavailable()
    if reason:
        pytest.skip(reason)
    made: list[Cluster] = []

    def make(n: int) -> Cluster:
        cluster = Cluster(n)
        made.append(cluster)
        return cluster

    try:
        yield make
    finally:
        for cluster in made:
            cluster.close()
