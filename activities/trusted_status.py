"""What a status write, an Event and a teardown may say of an order, whatever the workflow says.

A run's state is a hint (a holder of a module certificate can start a run with any state): the
activities that write on an order check what they are asked against the order as the API server
returns it, as the apply does (``trusted_apply``). Pure: the order's object in, a verdict out.
"""

from __future__ import annotations

import contextlib
from typing import Any

from activities.builders.common import ObjectNames
from activities.builders.exposure import cluster_local_url, external_host
from inference_api.payloads import OrderEvent, StatusUpdate
from inference_api.reasons import EventReason, Reason
from inference_api.settings import ModuleSettings
from inference_api.types import InferenceService

# An Event's message as the API server keeps it (it refuses longer ones): longer is cut, not refused.
EVENT_MESSAGE_MAX = 1024


def being_deleted(order: dict[str, Any] | None) -> bool:
    """Whether the API server says the order is being deleted (its deletionTimestamp is set)."""
    return bool(((order or {}).get("metadata") or {}).get("deletionTimestamp"))


def says_deleting(update: StatusUpdate) -> bool:
    """Whether a status write tells the user the order is being deleted."""
    return update.reason == Reason.DELETING or any(c.reason == Reason.DELETING for c in update.conditions)


def says_module_disabled(order: dict[str, Any] | None) -> bool:
    """Whether the order's stored status is the one the disable wrote (worker/disable.py)."""
    return ((order or {}).get("status") or {}).get("reason") == Reason.MODULE_DISABLED


def order_endpoint_urls(order: InferenceService, settings: ModuleSettings) -> set[str]:
    """Every URL the order's endpoint can have: its External host, its in-cluster Service."""
    urls = {cluster_local_url(order)}
    with contextlib.suppress(ValueError):  # a domainTemplate the settings refuse: no External URL
        urls.add(f"https://{external_host(order, settings)}")
    return urls


def trusted_status(
    update: StatusUpdate, order_obj: dict[str, Any], settings: ModuleSettings
) -> tuple[StatusUpdate | None, list[str]]:
    """The status write to make of ``update`` on ``order_obj``, and what was dropped from it.

    None: nothing is written (a run says Deleting of an order the API server does not delete). The
    endpoint URL must be one the order can have, the auth Secret the order's own (named after it);
    anything else is dropped (None), never written on the order for the user to follow.
    """
    if says_deleting(update) and not being_deleted(order_obj):
        return None, ["a Deleting status of an order that is not being deleted"]
    if says_module_disabled(order_obj) and not update.seenModuleDisabled:
        # Its workload was stopped while nothing ran: only a run that read that (its reconcile after
        # the enable, which applies the workload again) may say otherwise.
        return None, ["a status decided before the module was disabled (the next reconcile writes it)"]
    dropped: list[str] = []
    changes: dict[str, Any] = {}
    order = InferenceService.model_validate(order_obj)
    if update.endpoint is not None and update.endpoint.url not in order_endpoint_urls(order, settings):
        changes["endpoint"] = None
        dropped.append("an endpoint URL the order cannot have")
    if update.authSecretName is not None and update.authSecretName != ObjectNames(order.metadata.name).auth_secret:
        changes["authSecretName"] = None
        dropped.append("a Secret that is not the order's own auth Secret")
    generation = order.metadata.generation
    if update.observedGeneration is not None and generation is not None and update.observedGeneration > generation:
        changes["observedGeneration"] = generation
        dropped.append("an observedGeneration ahead of the order's")
    return (update.model_copy(update=changes) if changes else update), dropped


def trusted_event(event: OrderEvent) -> OrderEvent | None:
    """The Event to record: only the module's own reasons and types, the message cut to fit."""
    if event.reason not in {r.value for r in EventReason} or event.type not in ("Normal", "Warning"):
        return None
    if len(event.message) > EVENT_MESSAGE_MAX:
        return event.model_copy(update={"message": event.message[: EVENT_MESSAGE_MAX - 1] + "…"})
    return event
