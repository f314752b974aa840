"""Day 2 (issue 23): an edit whose model needs a larger volume rebuilds the StatefulSet (a claim
template cannot grow), and the apply says so — ``WorkloadRebuilding`` with the volume's size — where
it said ``RuntimeUpToDate`` before (it judged the placement after deleting the standing workload).
The apply activity against the local control plane (the bench of test_apply_cluster.py)."""

from __future__ import annotations

import pytest

from inference_api.reasons import Reason
from tests import factories as f
from tests.workload.test_apply_cluster import DEVICE_CLASS, Bench, bench, external_class  # noqa: F401

pytestmark = pytest.mark.cluster


def test_a_volume_that_must_grow_rebuilds_the_workload_and_says_so(bench: Bench) -> None:  # noqa: F811
    order = bench.create_order("grown", "apply-external")
    first = bench.apply(bench.apply_input(order, external_class(), f.plan(share=50, device_class=DEVICE_CLASS)))
    assert first.runtimeReason == Reason.RUNTIME_UP_TO_DATE
    before = bench.get("apps/v1", "StatefulSet", "grown")
    assert before is not None

    grown = bench.apply(
        bench.apply_input(order, external_class(), f.plan(share=50, device_class=DEVICE_CLASS, volume_gib=80))
    )
    assert grown.runtimeReason == Reason.WORKLOAD_REBUILDING
    assert not grown.runtimeCurrent
    assert "80 GiB volume" in grown.runtimeMessage
    after = bench.get("apps/v1", "StatefulSet", "grown")
    assert after is not None
    assert after["metadata"]["uid"] != before["metadata"]["uid"], "the StatefulSet was not rebuilt"

    # The same plan again: nothing to rebuild, nothing said.
    again = bench.apply(
        bench.apply_input(order, external_class(), f.plan(share=50, device_class=DEVICE_CLASS, volume_gib=80))
    )
    assert again.runtimeReason != Reason.WORKLOAD_REBUILDING
