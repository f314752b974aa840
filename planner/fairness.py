"""Namespaces served in turn: a round-robin queue (pure) and an asyncio gate built on it.

One namespace's flood must not delay another namespace's order by more than a turn. Both the
observer's start window (``worker/observer/outbox.py``: new orders' workflow starts) and the planner
service's queue (``planner/service.py``: launch-plan requests) hold their waiters in a
:class:`FairQueue`: first come first served *within* a namespace, and the namespaces with something
waiting take turns, one item each (deficit round-robin with every item costing one: a plain
round-robin). A namespace that comes with its first waiter joins the end of the turn; one whose
last waiter leaves drops out of it.

So an item of namespace B put behind any number of namespace A's waits behind at most one item of
every other namespace with waiters (``position``), whatever A queued before it.

Pure: no I/O, no clock. The planner imports it, and the observer (a later layer) does too.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import OrderedDict, deque
from collections.abc import AsyncIterator, Hashable, Iterator
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class FairQueue(Generic[K, V]):
    """Items by key, each in one group (a namespace); ``popleft`` serves the groups in turn.

    A mapping of key → item for reading (``in``, ``get``, ``len``, iteration): iteration yields the
    keys in the order ``popleft`` would serve them if nothing else came."""

    def __init__(self) -> None:
        # group → its items, first come first
        self._groups: dict[Hashable, OrderedDict[K, V]] = {}
        # key → its group
        self._group_of: dict[K, Hashable] = {}
        # The groups with items, the next to be served first.
        self._turn: deque[Hashable] = deque()

    def push(self, group: Hashable, key: K, item: V) -> None:
        """Queue ``item`` at the end of its group; a key already queued keeps its place (and group)
        and takes the new item."""
        if key in self._group_of:
            self._groups[self._group_of[key]][key] = item
            return
        items = self._groups.get(group)
        if items is None:
            items = self._groups[group] = OrderedDict()
            self._turn.append(group)
        items[key] = item
        self._group_of[key] = group

    def popleft(self) -> tuple[K, V]:
        """The next item: the first of the group whose turn it is; that group goes to the end of the
        turn. ``IndexError`` when empty."""
        if not self._turn:
            raise IndexError("pop from an empty FairQueue")
        group = self._turn.popleft()
        items = self._groups[group]
        key, item = items.popitem(last=False)
        del self._group_of[key]
        if items:
            self._turn.append(group)
        else:
            del self._groups[group]
        return key, item

    def pop(self, key: K, default: V | None = None) -> V | None:
        """Take ``key`` out wherever it waits (``default`` when it does not)."""
        group = self._group_of.pop(key, None)
        if group is None:
            return default
        items = self._groups[group]
        item = items.pop(key)
        if not items:
            del self._groups[group]
            self._turn.remove(group)
        return item

    def get(self, key: K, default: V | None = None) -> V | None:
        group = self._group_of.get(key)
        return default if group is None else self._groups[group][key]

    def group_of(self, key: K) -> Hashable | None:
        return self._group_of.get(key)

    def groups(self) -> dict[Hashable, int]:
        """Group → how many of its items wait."""
        return {g: len(items) for g, items in self._groups.items()}

    def position(self, key: K) -> int:
        """How many items ``popleft`` serves before ``key`` (``KeyError`` when it does not wait)."""
        for n, queued in enumerate(self):
            if queued == key:
                return n
        raise KeyError(key)

    def __contains__(self, key: object) -> bool:
        return key in self._group_of

    def __len__(self) -> int:
        return len(self._group_of)

    def __bool__(self) -> bool:
        return bool(self._group_of)

    def __iter__(self) -> Iterator[K]:
        """The keys in serving order (a simulation of ``popleft`` on a copy of the turn)."""
        cursors = {g: iter(list(items)) for g, items in self._groups.items()}
        left = {g: len(items) for g, items in self._groups.items()}
        turn = deque(self._turn)
        while turn:
            group = turn.popleft()
            yield next(cursors[group])
            left[group] -= 1
            if left[group]:
                turn.append(group)


class FairGate:
    """At most ``capacity`` holders at once; the waiters are let in by :class:`FairQueue` (their
    groups in turn, first come first within one). For asyncio code on one event loop."""

    def __init__(self, capacity: int = 1) -> None:
        if capacity < 1:
            raise ValueError("the capacity must be at least 1")
        self.capacity = capacity
        self.holders = 0
        self._waiting: FairQueue[int, asyncio.Future[None]] = FairQueue()
        self._seq = 0

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    def waiting_by_group(self) -> dict[Hashable, int]:
        return self._waiting.groups()

    @contextlib.asynccontextmanager
    async def turn(self, group: Hashable) -> AsyncIterator[None]:
        """Hold one place for the block; waits for its group's turn when the gate is full."""
        if self.holders < self.capacity and not self._waiting:
            self.holders += 1
        else:
            self._seq += 1
            ticket = self._seq
            future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._waiting.push(group, ticket, future)
            try:
                await future  # its place was handed over by a leaving holder
            except asyncio.CancelledError:
                if self._waiting.pop(ticket) is None and future.done() and not future.cancelled():
                    self._leave()  # cancelled just as the place came: pass it on
                raise
        try:
            yield
        finally:
            self._leave()

    def _leave(self) -> None:
        """A holder leaves: its place goes straight to the next waiter in turn (the holder count stays)."""
        while self._waiting:
            _, future = self._waiting.popleft()
            if not future.done():
                future.set_result(None)
                return
        self.holders -= 1


__all__ = ["FairGate", "FairQueue"]
