"""The repair of a run stuck on a nondeterminism error (worker/observer/repair.py) on the production
Temporal: its SQL visibility answers the listing by the system attribute ``TemporalReportedProblems``
(set at the server's default threshold of failed attempts) and the reset rebuilds the run."""

from __future__ import annotations

import uuid

import pytest
from temporalio.contrib.pydantic import pydantic_data_converter

from devstack.temporal_server import ProductionTemporal
from tests.observer.test_repair import a_stuck_run_is_reset_and_decides_every_report_again
from worker.search_attribute_registration import ensure_search_attributes

pytestmark = [pytest.mark.prodtemporal]


async def test_a_stuck_run_is_found_on_sql_visibility_and_rebuilt(production_temporal: ProductionTemporal) -> None:
    namespace = f"repair-{uuid.uuid4().hex[:6]}"
    await production_temporal.register_namespace(await production_temporal.connect("cli"), namespace)
    # The observer's own client certificate: the repair is the observer's.
    client = await production_temporal.connect("watcher", namespace=namespace, data_converter=pydantic_data_converter)
    await ensure_search_attributes(client, namespace)
    await a_stuck_run_is_reset_and_decides_every_report_again(client, named_within=240)
