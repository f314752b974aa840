"""The worker registers the search attributes the module's workflows set (``workflows.search_attributes``)
when it starts, through the Temporal operator service, in ``temporal.namespace``.

Idempotent: an attribute already registered with the same type is left alone; one registered with
another type is an error naming it (the workflows would fail to set it). A server that does not let
this client register them (no permission, Temporal Cloud, where attributes are managed in the Cloud
console or ``tcld``) is an error that says so and what to do: the worker does not start rather than
run workflows whose attribute updates would fail. So is a namespace with no room left for them
(on SQL visibility a namespace holds at most 10 custom Keyword attributes; the module needs 8).
Messages carry names and types only, never credentials.

Kept, not only registered: :func:`keep_search_attributes` checks the namespace again every
``worker.searchAttributeCheckSeconds`` and registers what went missing. A production Temporal's
namespace that is made again (deleted and registered, restored from an older backup) comes back
without them, and every order's workflow task then fails on its first attribute update; they
converge again within one check, with no restart. A check that fails is logged and tried again at
the next one: the worker keeps serving the orders it can.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping, Sequence

import structlog
from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import AddSearchAttributesRequest, ListSearchAttributesRequest
from temporalio.client import Client
from temporalio.common import SearchAttributeKey
from temporalio.service import RPCError, RPCStatusCode

from workflows.search_attributes import ALL_KEYS, type_name

log = structlog.get_logger(__name__)

# The statuses that say "this client may not do that here".
_NOT_ALLOWED = (RPCStatusCode.PERMISSION_DENIED, RPCStatusCode.UNAUTHENTICATED, RPCStatusCode.UNIMPLEMENTED)


# The module's Keyword attributes: what a SQL visibility namespace's 10 Keyword columns must hold.
KEYWORDS = sum(key.indexed_value_type == IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD for key in ALL_KEYS)


class SearchAttributeError(RuntimeError):
    """The module's search attributes are not usable in the namespace and the worker cannot fix it."""


def _type_name(value: int) -> str:
    name = IndexedValueType.Name(value)  # type: ignore[arg-type]
    return name.removeprefix("INDEXED_VALUE_TYPE_").title().replace("_", "")


def _cli_command(namespace: str, keys: Iterable[SearchAttributeKey]) -> str:
    pairs = " ".join(f"{key.name}:{type_name(key)}" for key in keys)
    return (
        f"for pair in {pairs}; do temporal operator search-attribute create --namespace {namespace} "
        '--name "${pair%:*}" --type "${pair#*:}"; done'
    )


def missing_keys(
    registered: Mapping[str, int], keys: Sequence[SearchAttributeKey] = ALL_KEYS
) -> list[SearchAttributeKey]:
    """The keys not registered yet; raises :class:`SearchAttributeError` for one registered with
    another type. ``registered``: name → IndexedValueType, as the operator service lists them."""
    conflicts = [
        f"{key.name} is registered as {_type_name(registered[key.name])}, the module needs "
        f"{_type_name(key.indexed_value_type)}"
        for key in keys
        if key.name in registered and registered[key.name] != key.indexed_value_type
    ]
    if conflicts:
        raise SearchAttributeError(
            "search attributes of another type are in the way: "
            + "; ".join(conflicts)
            + ". A Temporal namespace cannot change an attribute's type: use a namespace without them "
            "(temporal.namespace), or remove them there first (temporal operator search-attribute remove)."
        )
    return [key for key in keys if key.name not in registered]


async def _registered(client: Client, namespace: str) -> dict[str, int]:
    listed = await client.operator_service.list_search_attributes(ListSearchAttributesRequest(namespace=namespace))
    return {**dict(listed.system_attributes), **dict(listed.custom_attributes)}


def _refused(err: RPCError, namespace: str, what: str, keys: Sequence[SearchAttributeKey]) -> SearchAttributeError:
    return SearchAttributeError(
        f"Temporal refused to {what} the search attributes of namespace {namespace!r} "
        f"({err.status.name if err.status else 'error'}): this worker's Temporal identity may not manage "
        "them. Register them once with an identity that may (on Temporal Cloud, in the Cloud console or with "
        f"tcld), e.g. `{_cli_command(namespace, keys)}`, then start the worker again."
    )


def _rejected(err: RPCError, namespace: str, keys: Sequence[SearchAttributeKey]) -> SearchAttributeError:
    # The server's reason is repeated here: the request carried names and types only, so it echoes
    # nothing else (e.g. "cannot have more than 10 search attribute of type Keyword").
    return SearchAttributeError(
        f"Temporal rejected the search attributes {', '.join(key.name for key in keys)} in namespace "
        f"{namespace!r}: {err.message}. On SQL visibility (a Temporal server on PostgreSQL, MySQL or SQLite) "
        f"a namespace holds at most 10 custom Keyword attributes, and the module needs {KEYWORDS}: give "
        "it a namespace of its own (temporal.namespace), or remove attributes nothing uses there "
        "(temporal operator search-attribute remove), then start the worker again."
    )


async def ensure_search_attributes(
    client: Client, namespace: str, keys: Sequence[SearchAttributeKey] = ALL_KEYS, quiet: bool = False
) -> list[str]:
    """Register the keys the namespace lacks; return the names added (empty when all were there)."""
    try:
        registered = await _registered(client, namespace)
    except RPCError as err:
        if err.status in _NOT_ALLOWED:
            raise _refused(err, namespace, "list", keys) from None
        raise
    missing = missing_keys(registered, keys)
    if not missing:
        # Said once at start; the keeper's checks every minute say nothing while nothing is missing.
        (log.debug if quiet else log.info)("search attributes registered already", namespace=namespace, count=len(keys))
        return []
    request = AddSearchAttributesRequest(
        namespace=namespace,
        search_attributes={key.name: key.indexed_value_type for key in missing},  # type: ignore[misc]
    )
    try:
        await client.operator_service.add_search_attributes(request)
    except RPCError as err:
        if err.status in _NOT_ALLOWED:
            raise _refused(err, namespace, "add", missing) from None
        if err.status == RPCStatusCode.INVALID_ARGUMENT:
            raise _rejected(err, namespace, missing) from None
        if err.status != RPCStatusCode.ALREADY_EXISTS:
            raise
        # Another worker registered them a moment ago: judge what is there now.
        missing_keys(await _registered(client, namespace), keys)
    names = [key.name for key in missing]
    log.info("search attributes registered", namespace=namespace, added=names)
    return names


async def keep_search_attributes(
    client: Client, namespace: str, every_seconds: float, keys: Sequence[SearchAttributeKey] = ALL_KEYS
) -> None:
    """Until cancelled: every ``every_seconds``, register the keys the namespace lacks again (level-
    triggered: what the namespace holds is read each time, nothing is remembered). Never raises but
    for cancellation: a refusal or an unreachable server is logged and the next check tries again."""
    while True:
        await asyncio.sleep(every_seconds)
        try:
            added = await ensure_search_attributes(client, namespace, keys, quiet=True)
        except SearchAttributeError as err:
            log.error("search attributes cannot be registered again", namespace=namespace, error=str(err))
            continue
        except RPCError as err:
            log.warning(
                "search attributes not checked: Temporal did not answer",
                namespace=namespace,
                status=err.status.name if err.status else None,
            )
            continue
        if added:
            log.warning("search attributes were missing and are registered again", namespace=namespace, added=added)
