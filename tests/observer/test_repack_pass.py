"""The observer's repack pass (``Observer.repack_once``): what it asks of which order, from its caches and
the inventory the replica placer sees. The workflow's side is tests/workflows/test_move_signal.py; the
whole loop on the local stack is tests/e2e/test_repack_consolidation.py."""

from __future__ import annotations

from typing import Any, cast

from kubernetes.client import ApiClient
from temporalio.client import Client

from inference_api.observation import OrderSignal
from inference_api.settings import ModuleSettings, ObserverSettings, RepackSettings, TemporalSettings
from planner.inventory import InventorySnapshot
from tests.observer.test_repack_candidates import a_class, order, t4
from worker.observer import informer as inf
from worker.observer.metrics import REPACK_CONSOLIDATING, REPACK_DEVICES_FREED, REPACK_DEVICES_TO_FREE
from worker.observer.observer import Observer
from worker.observer.outbox import Delivery


def repacking_observer(max_moves: int = 4) -> tuple[Observer, list[Delivery]]:
    """An observer with no informers of its own running (caches filled by the test), its outbox kept."""
    settings = ModuleSettings(
        temporal=TemporalSettings(taskQueue="repack-pass"),
        observer=ObserverSettings(repack=RepackSettings(enabled=True, maxMovesPerPass=max_moves)),
    )
    # The pass only puts deliveries in the outbox: no Temporal call is made here.
    obs = Observer(ApiClient(), cast(Client, None), settings, resources=[], fingerprint="fp")
    sent: list[Delivery] = []
    obs.outbox.put = sent.append  # type: ignore[method-assign, assignment]
    cls = a_class()
    obs.informers[inf.CLASS].cache["a-class"] = cast(dict[str, Any], cls.model_dump(mode="json", by_alias=True))
    return obs, sent


def known(obs: Observer, *orders: dict[str, Any]) -> None:
    for o in orders:
        obs.orders.cache[f"{o['metadata']['namespace']}/{o['metadata']['name']}"] = o


def test_a_share_whose_move_frees_a_card_is_asked_with_its_target() -> None:
    obs, sent = repacking_observer()
    known(obs, order("x", share=25), order("y", share=50))
    snapshot = InventorySnapshot(devices=[t4("a", ("ns/x", 25)), t4("b", ("ns/y", 50))])
    asked_before = REPACK_CONSOLIDATING._value.get()
    freed_before = REPACK_DEVICES_TO_FREE._value.get()

    asked = obs.repack_once(snapshot)

    assert asked == ["ns/x"]
    assert [(s.signal, s.args, s.order) for s in sent] == [(OrderSignal.MOVE, ["b/gpu-0"], "ns/x")]
    assert REPACK_CONSOLIDATING._value.get() - asked_before == 1
    assert REPACK_DEVICES_TO_FREE._value.get() - freed_before == 1


def test_without_the_placer_s_inventory_only_stranded_orders_are_asked_and_without_a_target() -> None:
    obs, sent = repacking_observer()
    known(obs, order("whole", share=100), order("x", share=25), order("y", share=50))

    assert obs.repack_once(None) == ["ns/whole"]
    assert [(s.signal, s.args) for s in sent] == [(OrderSignal.MOVE, [])]


def test_stranded_orders_come_first_and_the_pass_stays_within_its_bound() -> None:
    obs, sent = repacking_observer(max_moves=1)
    known(obs, order("whole", share=100), order("x", share=25), order("y", share=50))
    snapshot = InventorySnapshot(devices=[t4("a", ("ns/x", 25)), t4("b", ("ns/y", 50)), t4("c", ("ns/whole", 100))])

    assert obs.repack_once(snapshot) == ["ns/whole"]
    assert len(sent) == 1

    obs2, sent2 = repacking_observer(max_moves=2)
    known(obs2, order("whole", share=100), order("x", share=25), order("y", share=50))
    assert obs2.repack_once(snapshot) == ["ns/whole", "ns/x"]
    assert [s.args for s in sent2] == [[], ["b/gpu-0"]]


def test_a_device_asked_to_be_freed_is_counted_won_back_once_a_pass_sees_it_empty() -> None:
    obs, _ = repacking_observer()
    known(obs, order("x", share=25), order("y", share=50))
    obs.repack_once(InventorySnapshot(devices=[t4("a", ("ns/x", 25)), t4("b", ("ns/y", 50))]))
    before = REPACK_DEVICES_FREED._value.get()

    # The move under way: the share is on both cards (the new replica loads, the old one serves).
    obs.repack_once(InventorySnapshot(devices=[t4("a", ("ns/x", 25)), t4("b", ("ns/y", 50), ("ns/x", 25))]))
    assert REPACK_DEVICES_FREED._value.get() == before
    # The old replica gone: card a is empty, won back; seen again, it is not counted twice.
    moved = InventorySnapshot(devices=[t4("a"), t4("b", ("ns/y", 50), ("ns/x", 25))])
    obs.repack_once(moved)
    obs.repack_once(moved)
    assert REPACK_DEVICES_FREED._value.get() - before == 1
    assert obs.repack_freeing == {}


def test_an_order_asked_is_left_out_of_the_next_passes_so_others_get_their_turn() -> None:
    obs, sent = repacking_observer(max_moves=1)
    known(obs, order("x", share=10), order("y", share=20), order("z", share=50))
    # x (10) alone on a, y (20) alone on b, z (50) on c: the least used card (a) is emptied first.
    snapshot = InventorySnapshot(devices=[t4("a", ("ns/x", 10)), t4("b", ("ns/y", 20)), t4("c", ("ns/z", 50))])
    assert obs.repack_once(snapshot) == ["ns/x"]
    # The same picture again (x's plan missed its target, say): x waits its turn out, y is asked.
    assert obs.repack_once(snapshot) == ["ns/y"]
    assert [s.args for s in sent] == [["c/gpu-0"], ["c/gpu-0"]]
    # Past the pause, x is asked again.
    obs.repack_asked = {key: when - 3 * obs.config.repack.intervalSeconds for key, when in obs.repack_asked.items()}
    assert obs.repack_once(snapshot) == ["ns/x"]
