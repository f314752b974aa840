"""The worker's search-attribute registration on SQL visibility (the production Temporal on
PostgreSQL), where attributes exist per namespace in pre-made columns: 10 of type Keyword."""

from __future__ import annotations

import uuid

import pytest
from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import AddSearchAttributesRequest, ListSearchAttributesRequest

from devstack.temporal_server import ProductionTemporal
from worker.search_attribute_registration import SearchAttributeError, ensure_search_attributes
from workflows.search_attributes import ALL_KEYS

KEYWORD = IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD


async def _namespace(server: ProductionTemporal) -> str:
    name = f"sa-{uuid.uuid4().hex[:6]}"
    await server.register_namespace(await server.connect("cli"), name)
    return name


async def test_registration_is_per_namespace_and_idempotent(production_temporal: ProductionTemporal) -> None:
    first, second = await _namespace(production_temporal), await _namespace(production_temporal)
    client = await production_temporal.connect("worker")
    assert await ensure_search_attributes(client, first) == [key.name for key in ALL_KEYS]
    assert await ensure_search_attributes(client, first) == []  # a second worker, a restart
    # Registered in one namespace only: the other has none of them until its own worker starts.
    listed = await client.operator_service.list_search_attributes(ListSearchAttributesRequest(namespace=second))
    assert not {key.name for key in ALL_KEYS} & set(listed.custom_attributes)


async def test_a_namespace_without_room_for_them_is_a_clear_refusal(production_temporal: ProductionTemporal) -> None:
    namespace = await _namespace(production_temporal)
    client = await production_temporal.connect("cli")
    # Three Keyword attributes of someone else's: 3 + the module's 8 > the 10 a namespace holds.
    others = {f"Theirs{i}": KEYWORD for i in range(3)}
    await client.operator_service.add_search_attributes(
        AddSearchAttributesRequest(namespace=namespace, search_attributes=others)
    )
    with pytest.raises(SearchAttributeError) as caught:
        await ensure_search_attributes(client, namespace)
    message = str(caught.value)
    assert f"in namespace {namespace!r}" in message
    assert "cannot have more than 10 search attribute of type Keyword" in message
    assert "a namespace of its own (temporal.namespace)" in message
