"""Typed search attributes of order and preemption workflows (never secrets: they are not encrypted)."""

from __future__ import annotations

from temporalio.common import SearchAttributeKey, SearchAttributeUpdate

from inference_api.payloads import OrderRef

ORDER_NAMESPACE = SearchAttributeKey.for_keyword("OrderNamespace")
ORDER_NAME = SearchAttributeKey.for_keyword("OrderName")
ORDER_CLASS = SearchAttributeKey.for_keyword("OrderClass")
ORDER_PHASE = SearchAttributeKey.for_keyword("OrderPhase")
ORDER_REASON = SearchAttributeKey.for_keyword("OrderReason")
ORDER_DEVICE_CLASS = SearchAttributeKey.for_keyword("OrderDeviceClass")
# The release fingerprint (activities/release.py) the order's last reconcile ran under: the
# observer's resync signals every order whose value is not the one in force.
ORDER_RELEASE = SearchAttributeKey.for_keyword("OrderRelease")

# The workflow code generation a run of an order started under (workflows.patches.RUN_GENERATION), set
# once, by the run's first workflow task: a release that retires a patch first counts the running
# runs that started before the patch existed (workflows/patches.py). Int: it is compared.
ORDER_RUN_GENERATION = SearchAttributeKey.for_int("OrderRunGeneration")

# Preemption workflows: Idle | Holding (donors held at a lowered bound) | Blocked (an order cannot grow).
# They carry OrderDeviceClass too, so one query lists an order class's orders and its preemption.
PREEMPTION_STATUS = SearchAttributeKey.for_keyword("PreemptionStatus")

ALL_KEYS = (
    ORDER_NAMESPACE,
    ORDER_NAME,
    ORDER_CLASS,
    ORDER_PHASE,
    ORDER_REASON,
    ORDER_DEVICE_CLASS,
    ORDER_RELEASE,
    PREEMPTION_STATUS,
    ORDER_RUN_GENERATION,
)


def dev_server_flags() -> list[str]:
    """`temporal server start-dev` flags registering the keys."""
    flags: list[str] = []
    for key in ALL_KEYS:
        flags += ["--search-attribute", f"{key.name}={type_name(key)}"]
    return flags


def type_name(key: SearchAttributeKey) -> str:
    """The attribute's type as the Temporal CLI names it (``Keyword``, ``Int``)."""
    from temporalio.api.enums.v1 import IndexedValueType

    name = IndexedValueType.Name(key.indexed_value_type)  # type: ignore[arg-type]
    return name.removeprefix("INDEXED_VALUE_TYPE_").title().replace("_", "")


def order_search_attributes(
    ref: OrderRef,
    class_name: str | None,
    phase: str,
    reason: str | None,
    device_class: str | None,
    release: str | None = None,
    run_generation: int | None = None,
) -> list[SearchAttributeUpdate]:
    """``run_generation``: given on a run's first task only (the generation it started under)."""
    updates: list[SearchAttributeUpdate] = [
        ORDER_NAMESPACE.value_set(ref.namespace),
        ORDER_NAME.value_set(ref.name),
        ORDER_PHASE.value_set(str(phase)),
    ]
    if run_generation is not None:
        updates.append(ORDER_RUN_GENERATION.value_set(run_generation))
    optional = (
        (ORDER_CLASS, class_name),
        (ORDER_REASON, reason),
        (ORDER_DEVICE_CLASS, device_class),
        (ORDER_RELEASE, release),
    )
    for key, value in optional:
        updates.append(key.value_set(value) if value else key.value_unset())
    return updates


def preemption_search_attributes(device_class: str, status: str) -> list[SearchAttributeUpdate]:
    return [ORDER_DEVICE_CLASS.value_set(device_class), PREEMPTION_STATUS.value_set(status)]
