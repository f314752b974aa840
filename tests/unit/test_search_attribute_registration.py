"""The worker's search-attribute registration, its pure parts: what is missing, what is in the way,
and the message when Temporal does not let the worker register them (the real server: tests/cli)."""

from __future__ import annotations

import pytest
from temporalio.api.enums.v1 import IndexedValueType
from temporalio.service import RPCError, RPCStatusCode

from worker.search_attribute_registration import SearchAttributeError, _refused, _rejected, missing_keys
from workflows.search_attributes import ALL_KEYS, ORDER_NAME, ORDER_PHASE

KEYWORD = IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD
TEXT = IndexedValueType.INDEXED_VALUE_TYPE_TEXT


def test_nothing_registered_means_every_key_is_missing() -> None:
    assert missing_keys({"WorkflowType": KEYWORD}) == list(ALL_KEYS)


def test_keys_registered_with_the_same_type_are_left_alone() -> None:
    registered = {key.name: key.indexed_value_type for key in ALL_KEYS if key is not ORDER_NAME}
    assert missing_keys(registered) == [ORDER_NAME]
    assert missing_keys({key.name: key.indexed_value_type for key in ALL_KEYS}) == []


def test_a_key_of_another_type_is_named_with_both_types() -> None:
    registered = {key.name: int(key.indexed_value_type) for key in ALL_KEYS} | {ORDER_PHASE.name: TEXT}
    with pytest.raises(SearchAttributeError) as caught:
        missing_keys(registered)
    message = str(caught.value)
    assert "OrderPhase is registered as Text, the module needs Keyword" in message
    assert "OrderName" not in message


@pytest.mark.parametrize("status", [RPCStatusCode.PERMISSION_DENIED, RPCStatusCode.UNAUTHENTICATED])
def test_a_refusal_says_what_was_refused_and_how_to_register_them_instead(status: RPCStatusCode) -> None:
    err = RPCError("Request unauthorized. token=secret-value", status, b"")
    message = str(_refused(err, "orders", "add", list(ALL_KEYS)))
    assert f"Temporal refused to add the search attributes of namespace 'orders' ({status.name})" in message
    assert "temporal operator search-attribute create --namespace orders" in message
    assert all(key.name in message for key in ALL_KEYS)
    # The server's own text (which could echo a credential) is not repeated.
    assert "secret-value" not in message


def test_a_namespace_without_room_says_so_and_what_to_do() -> None:
    err = RPCError(
        "Unable to create search attributes: cannot have more than 10 search attribute of type Keyword.",
        RPCStatusCode.INVALID_ARGUMENT,
        b"",
    )
    message = str(_rejected(err, "shared", list(ALL_KEYS)))
    assert "Temporal rejected the search attributes OrderNamespace, OrderName" in message
    assert "in namespace 'shared': Unable to create search attributes: cannot have more than 10" in message
    assert "a namespace of its own (temporal.namespace)" in message
