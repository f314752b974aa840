"""The observer judges classes against what the cluster has: informer items in, class status writes
and order signals out (no API server: the status patch is recorded; the outbox is not run).

A class is judged once every informer of a kind classes name has listed; again whenever one of those
objects appears or goes (or its kind starts or stops being served); the status it writes coming back
tells the class's orders when Ready flipped, so an order waiting with ClassNotReady goes on."""

from __future__ import annotations

import asyncio
from typing import Any

from kubernetes.client import ApiClient

from inference_api.observation import ObservedChange, OrderSignal
from inference_api.settings import ModuleSettings, ObserverSettings, TemporalSettings
from worker.observer import Observer
from worker.observer import decisions as d
from worker.observer import informer as inf
from worker.observer.informer import Listed, Resource, Watched

DEBOUNCE = 0.02


def observer(kinds: tuple[str, ...] = inf.REFERENCE_KINDS) -> tuple[Observer, list[tuple[str, dict[str, Any]]]]:
    """An observer informing on orders, classes and ``kinds`` (never started: items are handed to it),
    and the class status patches it makes."""
    settings = ModuleSettings(
        temporal=TemporalSettings(taskQueue="refs"), observer=ObserverSettings(debounceSeconds=DEBOUNCE)
    )
    resources = [Resource(kind, lambda **kw: None) for kind in (inf.ORDER, inf.CLASS, *kinds)]
    obs = Observer(
        ApiClient(),
        object(),  # type: ignore[arg-type]  # no Temporal call is made here
        settings,
        resources=resources,
        fingerprint="fp",
        read_secret=lambda namespace, name: None,
    )
    patches: list[tuple[str, dict[str, Any]]] = []
    obs._patch_class_status = lambda name, status: patches.append((name, status))  # type: ignore[method-assign]
    return obs, patches


def a_class(rv: str = "1", status: dict[str, Any] | None = None, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "ai.deckhouse.io/v1alpha1",
        "kind": "InferenceServiceClass",
        "metadata": {"name": "llm", "generation": 1, "resourceVersion": rv, "uid": "class-uid"},
        "spec": {"modelPolicy": {"allowedEndpointTypes": ["Chat"]}, **spec},
        "status": status or {},
    }


def an_order(name: str, uid: str) -> dict[str, Any]:
    return {
        "apiVersion": "ai.deckhouse.io/v1alpha1",
        "kind": "InferenceService",
        "metadata": {"name": name, "namespace": "team", "uid": uid, "generation": 1, "resourceVersion": "1"},
        "spec": {"inferenceServiceClassName": "llm", "model": {"src": "HuggingFace", "ref": {"name": "a/b"}}},
        "status": {"phase": "Pending", "reason": "ClassNotReady"},
    }


def named(name: str, rv: str = "1") -> dict[str, Any]:
    return {"metadata": {"name": name, "resourceVersion": rv, "uid": f"uid-{name}"}}


async def drain() -> None:
    """Let the spawned status writes (threads) and the debounced flushes run."""
    await asyncio.sleep(DEBOUNCE * 5)


def ready_of(status: dict[str, Any]) -> tuple[str, str, str]:
    (ready,) = [c for c in status["conditions"] if c["type"] == "Ready"]
    return ready["status"], ready["reason"], ready["message"]


def sent(obs: Observer) -> dict[tuple[str, str], list[Any]]:
    out = {(key[0].split("/")[2], key[1]): delivery.args for key, delivery in obs.outbox.pending.items()}
    obs.outbox.pending.clear()
    return out


async def test_a_class_is_judged_once_what_it_names_is_known_and_again_when_it_appears() -> None:
    obs, patches = observer()
    cls = a_class(
        acceleratorPolicy={"allowedDeviceClasses": ["gpu-a"]},
        scalingPolicy={"minReplicas": 1, "maxReplicas": 2, "allowedPriorityClassNames": ["high"]},
        modelStorageClassName="fast",
    )
    obs.handle(Listed(inf.CLASS, [cls]))
    obs.handle(Listed(inf.ORDER, [an_order("chat", "u-chat"), an_order("other", "u-other")]))
    obs.handle(Listed(inf.DEVICE_CLASS, []))
    obs.handle(Listed(inf.PRIORITY_CLASS, [named("high")]))
    obs.handle(Listed(inf.STORAGE_CLASS, [named("fast")]))
    await drain()
    assert patches == []  # ClusterIssuers not listed yet: not judged on a half-known cluster
    obs.handle(Listed(inf.CLUSTER_ISSUER, [], served=False))
    await drain()
    ((name, status),) = patches
    assert name == "llm"
    assert status["phase"] == "Pending"
    assert ready_of(status)[:2] == ("False", "DeviceClassNotFound")
    assert 'DeviceClass "gpu-a"' in ready_of(status)[2]
    assert {c["type"]: c["status"] for c in status["conditions"]}["Validated"] == "True"
    sent(obs)

    # The same judgement again before the write came back: not written twice.
    obs.judge_classes()
    await drain()
    assert len(patches) == 1

    # The write comes back: the class was not Ready before either (no status): its orders are told.
    written = a_class(rv="2", status=status, **cls["spec"])
    obs.handle(Watched(inf.CLASS, d.MODIFIED, written))
    await drain()
    assert len(patches) == 1  # the stored status says it already
    told = sent(obs)
    assert told[("chat", OrderSignal.OBSERVED)] == [
        ObservedChange(what="InferenceServiceClass llm is not Ready (DeviceClassNotFound)", kind=inf.CLASS)
    ]
    assert ("other", OrderSignal.OBSERVED) in told

    # The DeviceClass appears: Ready.
    obs.handle(Watched(inf.DEVICE_CLASS, d.ADDED, named("gpu-a")))
    await drain()
    (_, status2) = patches[-1]
    assert status2["phase"] == "Ready"
    assert ready_of(status2)[:2] == ("True", "ClassValid")
    obs.handle(Watched(inf.CLASS, d.MODIFIED, a_class(rv="3", status=status2, **cls["spec"])))
    await drain()
    assert sent(obs)[("chat", OrderSignal.OBSERVED)] == [
        ObservedChange(what="InferenceServiceClass llm is Ready", kind=inf.CLASS)
    ]

    # A PriorityClass it names is deleted: not Ready again, with its reason.
    obs.handle(Watched(inf.PRIORITY_CLASS, d.DELETED, named("high")))
    await drain()
    (_, status3) = patches[-1]
    assert ready_of(status3)[:2] == ("False", "PriorityClassNotFound")
    assert len(patches) == 3

    # A DeviceClass's metadata edit (no appearance, no deletion) judges nothing.
    obs.handle(Watched(inf.DEVICE_CLASS, d.MODIFIED, named("gpu-a", rv="9")))
    await drain()
    assert len(patches) == 3


async def test_an_issuer_is_judged_only_while_cert_manager_is_installed() -> None:
    obs, patches = observer()
    https = {"mode": "CertManager", "certManager": {"clusterIssuerName": "letsencrypt"}}
    cls = a_class(exposurePolicy={"type": "External", "authentication": "Token", "https": https})
    obs.handle(Listed(inf.CLASS, [cls]))
    for kind in (inf.DEVICE_CLASS, inf.PRIORITY_CLASS, inf.STORAGE_CLASS):
        obs.handle(Listed(kind, []))
    obs.handle(Listed(inf.CLUSTER_ISSUER, [], served=False))
    await drain()
    (_, status) = patches[-1]
    ready, reason, message = ready_of(status)
    assert (ready, reason) == ("True", "ClassValid")
    assert (
        'cert-manager is not installed (the API server serves no ClusterIssuer kind), so ClusterIssuer "letsencrypt"'
        in message
    )

    # cert-manager installed, the issuer not (yet) made: IssuerNotFound; made: Ready.
    obs.handle(Watched(inf.CLASS, d.MODIFIED, a_class(rv="2", status=status, **cls["spec"])))
    obs.handle(Listed(inf.CLUSTER_ISSUER, [named("selfsigned")]))
    await drain()
    (_, status) = patches[-1]
    assert ready_of(status)[:2] == ("False", "IssuerNotFound")
    assert 'ClusterIssuer "letsencrypt"' in ready_of(status)[2]
    obs.handle(Watched(inf.CLASS, d.MODIFIED, a_class(rv="3", status=status, **cls["spec"])))
    obs.handle(Watched(inf.CLUSTER_ISSUER, d.ADDED, named("letsencrypt")))
    await drain()
    (_, status) = patches[-1]
    assert ready_of(status) == ("True", "ClassValid", "the class is valid and everything it names exists")


async def test_an_observer_informing_on_none_of_these_kinds_judges_the_class_alone() -> None:
    obs, patches = observer(kinds=())
    obs.handle(Listed(inf.CLASS, [a_class(modelStorageClassName="gone")]))
    await drain()
    ((_, status),) = patches
    assert ready_of(status) == ("True", "ClassValid", "the class is valid")


async def test_the_production_observer_informs_on_every_kind_a_class_names() -> None:
    obs = Observer(
        ApiClient(),
        object(),  # type: ignore[arg-type]
        ModuleSettings(),
        fingerprint="fp",
        read_secret=lambda namespace, name: None,
    )
    assert obs.reference_kinds == list(inf.REFERENCE_KINDS)
    by_kind = {r.kind: r for r in obs.resources}
    for kind in (inf.DEVICE_CLASS, inf.STORAGE_CLASS, inf.CLUSTER_ISSUER):
        assert by_kind[kind].metadata_only, kind
    assert by_kind[inf.CLUSTER_ISSUER].optional
    assert by_kind[inf.MODEL].optional
    assert by_kind[inf.CLUSTER_MODEL].optional
    assert not by_kind[inf.DEVICE_CLASS].optional
