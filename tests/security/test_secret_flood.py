"""Four hundred labelled 700 KB Secrets made by a tenant leave the observer's memory where it was.

Anyone who may create Secrets in a namespace may put the module's labels on them. The observer's
Secret informer selects by those labels and, before, cached every such Secret whole: a tenant could
grow the observer's memory by the size of its Secrets (about 400 MB for these 400). It now lists and
watches their metadata only (PartialObjectMetadata): the informer, run in its own process exactly as
the observer runs it, against the real API server, grows by well under a megabyte. The whole-object
baseline and the numbers: benchmarks/secret_flood.py.
"""

from __future__ import annotations

import pytest
from kubernetes.client import CoreV1Api

from devstack.cluster.launcher import LocalCluster
from tests.security.flood import COUNT, SIZE, measure

pytestmark = pytest.mark.cluster


def test_a_flood_of_labelled_secrets_leaves_the_observers_memory_where_it_was(
    local_cluster: LocalCluster, namespace: str
) -> None:
    with local_cluster.api_client("ns-user") as tenant:
        memory = measure(local_cluster.kubeconfig("admin"), namespace, tenant, full=False)
    assert memory.cached == COUNT
    flood_kib = COUNT * SIZE // 1024
    # The whole Secrets would be ~273,000 KiB of data (and more as Python strings); their metadata is
    # a few hundred bytes each. 8 MiB leaves room for the allocator's noise, not for one in 30 Secrets.
    assert memory.growth_kib < 8 * 1024, (memory, flood_kib)
    # Free the API server's memory for the tests that follow (the namespace goes with its fixture).
    with local_cluster.api_client("admin") as admin:
        CoreV1Api(admin).delete_collection_namespaced_secret(
            namespace, label_selector="ai.deckhouse.io/inference-service"
        )
