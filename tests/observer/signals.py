"""What an observer told its orders (the outbox's pending ``observed`` signals), for the observer tests."""

from __future__ import annotations

from inference_api.observation import OrderSignal
from worker.observer.observer import Observer


def observed(obs: Observer, uid: str) -> list[str]:
    """The ``observed`` changes queued for order ``uid`` after its debounce, taken from the outbox."""
    obs.flush(uid)
    found = [
        change.what
        for key, delivery in obs.outbox.pending.items()
        if key[1] == OrderSignal.OBSERVED
        for change in delivery.args
    ]
    obs.outbox.pending.clear()
    return found
