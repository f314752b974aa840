"""What every builder shares: the inputs of one order, the names, labels and owner of its objects.

The builders are pure: they read these inputs and return plain dicts ready for server-side
apply. They never read the cluster, the clock or a random source (the auth token is made by
``auth.new_token`` and handed in), so the same inputs always give the same bytes — which is
what lets a re-apply be a no-op and lets the tests compare whole objects.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING, Any

from inference_api.payloads import ModelResolution
from inference_api.plan import LaunchPlan
from inference_api.settings import ModuleSettings
from inference_api.types import (
    API_VERSION,
    EndpointType,
    InferenceService,
    InferenceServiceClass,
    ModelSource,
)
from planner.quantity import Quantity

if TYPE_CHECKING:
    from activities.builders.move import SetShape

FIELD_MANAGER = "ai-inference"
MANAGED_BY = "ai-inference"

# Labels. The order label is the one selector of the workload: it never changes for the life
# of an order, which matters because a StatefulSet's selector is immutable.
LABEL_NAME = "app.kubernetes.io/name"
LABEL_COMPONENT = "app.kubernetes.io/component"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
LABEL_ORDER = "ai.deckhouse.io/inference-service"
# On an order's Ingress: a digest of its host, so that the apply finds every Ingress of the module with
# the same host in one labelled list (a label value cannot hold a host); only the module sets it.
LABEL_ENDPOINT_HOST = "ai.deckhouse.io/endpoint-host"

# Annotations the builders write and the pure deciders read back from standing objects.
ANNOTATION_RUNTIME_VERSION = "ai.deckhouse.io/runtime-version"
ANNOTATION_RUNTIME_IMAGE = "ai.deckhouse.io/runtime-image"
ANNOTATION_PLACEMENT = "ai.deckhouse.io/placement"
# A replica that goes (a move retired it, a scale-down, a rollout) sleeps this long before its containers
# are told to stop: the Service's endpoints drop it first, so no request is sent to an engine that stopped,
# and one in flight finishes (kubelet's preStop sleep action; within terminationGracePeriodSeconds).
PRE_STOP_SLEEP_SECONDS = 10
PRE_STOP = {"preStop": {"sleep": {"seconds": PRE_STOP_SLEEP_SECONDS}}}
ANNOTATION_ORDER_GENERATION = "ai.deckhouse.io/order-generation"
ANNOTATION_RUNTIME_HOLD = "ai.deckhouse.io/runtime-hold"
ANNOTATION_AUTH_SECRET_UID = "ai.deckhouse.io/auth-secret-uid"
# On the StatefulSet (not its template): a digest of the pod template as this module built it, so the
# next apply knows whether it changes the template for the module's own reasons (runtime.py).
ANNOTATION_TEMPLATE_DIGEST = "ai.deckhouse.io/pod-template-digest"
# Beside it, the generation of the class the set was applied under: a class edit moves the replicas the
# way the class asks, as an order edit does; only the module's own changes are held.
ANNOTATION_CLASS_GENERATION = "ai.deckhouse.io/class-generation"
# On the StatefulSet too, written with it and after the apply's prune finished: a digest of what the order
# should own (kinds and names) and of the release, so an apply that changes neither lists nothing.
ANNOTATION_PRUNED_FOR = "ai.deckhouse.io/pruned-for"


@dataclass(frozen=True)
class ObjectNames:
    """Names of everything an order owns, all derived from the order's own name."""

    order: str

    @property
    def statefulset(self) -> str:
        return self.order

    @property
    def service(self) -> str:
        return self.order

    @property
    def ingress(self) -> str:
        return self.order

    @property
    def autoscaler(self) -> str:
        return self.order

    @property
    def network_policy(self) -> str:
        return self.order

    @property
    def auth_secret(self) -> str:
        return f"{self.order}-auth"

    @property
    def tls_secret(self) -> str:
        return f"{self.order}-tls"

    @property
    def claim_template(self) -> str:
        return f"{self.order}-claim"


# Names inside the pod spec (not objects of their own).
RUNTIME_CONTAINER = "runtime"
FETCHER_CONTAINER = "model-fetcher"
MODEL_VOLUME = "model"
POD_CLAIM = "accelerator"
DEVICE_REQUEST = "gpu"
HTTP_PORT_NAME = "http"
RUNTIME_PORT = 8000
SERVICE_PORT = 80
MODEL_MOUNT_PATH = "/models"


class UnsupportedModelSourceError(ValueError):
    """The catalog names an origin the model fetcher cannot download from."""


@dataclass(frozen=True)
class ModelArtifact:
    """What the model fetcher downloads and what name the runtime serves it under.

    The order's own reference is not enough for a catalog model: a ClusterModel's name is not
    a repository, so the caller resolves the catalog's origin first (``artifact_for_order``).
    """

    repository: str
    served_name: str
    revision: str | None = None

    @property
    def local_dir(self) -> str:
        # The repository path under the volume: readable in `kubectl exec ... ls /models`.
        return f"{MODEL_MOUNT_PATH}/{self.repository}"


_HF_URL_PREFIXES = ("hf://", "https://huggingface.co/", "http://huggingface.co/", "huggingface.co/")
_HF_REPO = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")


def parse_catalog_source(source: str) -> tuple[str, str | None]:
    """``hf://org/repo[@revision]``, a huggingface.co URL or a bare ``org/repo`` → (repo, revision)."""
    rest = source.strip()
    for prefix in _HF_URL_PREFIXES:
        if rest.startswith(prefix):
            rest = rest[len(prefix) :]
            break
    rest = rest.rstrip("/")
    revision: str | None = None
    if "@" in rest:
        rest, revision = rest.split("@", 1)
    elif "/tree/" in rest:
        # https://huggingface.co/org/repo/tree/<revision>
        rest, revision = rest.split("/tree/", 1)
    if not _HF_REPO.match(rest):
        raise UnsupportedModelSourceError(
            f"the catalog source {source!r} is not a Hugging Face repository (hf://org/repo); "
            "the model fetcher cannot download it"
        )
    return rest, revision or None


def artifact_for_order(
    order: InferenceService, catalog_source: str | None = None, served_name: str | None = None
) -> ModelArtifact:
    """The artifact of an order: its own repository, or the catalog's origin for a catalog model.

    ``catalog_source`` and ``served_name`` come from model resolution (the catalog's
    Model/ClusterModel). On the direct Hugging Face path the order's repository is what is
    fetched, whatever the source says, and it is also the served name unless one is given.
    The namespace of a ``kind: Model`` reference is deliberately not carried into the workload.
    """
    model = order.spec.model
    if model.src == ModelSource.HUGGING_FACE:
        return ModelArtifact(repository=model.ref.name, served_name=served_name or model.ref.name)
    if not catalog_source:
        raise UnsupportedModelSourceError(
            f"the catalog model {model.ref.name!r} has no source to fetch from; resolve it from the catalog first"
        )
    repository, revision = parse_catalog_source(catalog_source)
    return ModelArtifact(repository=repository, served_name=served_name or repository, revision=revision)


def artifact_from_resolution(order: InferenceService, resolution: ModelResolution) -> ModelArtifact:
    """``artifact_for_order`` from the workflow's model resolution payload."""
    return artifact_for_order(order, catalog_source=resolution.source, served_name=resolution.servedName)


@dataclass(frozen=True, kw_only=True)
class WorkloadInputs:
    """Everything the builders of one order read.

    ``standing_statefulset`` is the StatefulSet as the server returned it, when one exists: its
    volume claim templates are kept (the server refuses changes to them). ``hold_running_replicas``
    comes from ``runtime.decide_runtime_hold`` and ``replica_ceiling`` from the preemption
    workflow (a donor's lowered bound); both default to "nothing special".
    """

    order: InferenceService
    service_class: InferenceServiceClass
    plan: LaunchPlan
    settings: ModuleSettings
    endpoint_type: EndpointType
    artifact: ModelArtifact
    standing_statefulset: Mapping[str, Any] | None = None
    hold_running_replicas: bool = False
    replica_ceiling: int | None = None
    # The uid of the order's token Secret: in the pod template, so a rotated token rolls the replicas.
    auth_secret_uid: str | None = None
    # The set's replicas, first ordinal, partition and move record (builders/move.py); None: n replicas
    # from ordinal 0, no move.
    set_shape: SetShape | None = None

    def __post_init__(self) -> None:
        if not self.order.metadata.namespace:
            raise ValueError(f"order {self.order.metadata.name!r} has no namespace")
        if not self.order.metadata.uid:
            # Without a uid there is no ownerReference, and without one deleting the order
            # would leave its objects behind.
            raise ValueError(f"order {self.order.metadata.name!r} has no uid; read it from the server first")
        if self.replica_ceiling is not None and self.replica_ceiling < 1:
            raise ValueError("replica_ceiling must be at least 1")

    @property
    def name(self) -> str:
        return self.order.metadata.name

    @property
    def namespace(self) -> str:
        assert self.order.metadata.namespace is not None  # checked in __post_init__
        return self.order.metadata.namespace

    @property
    def names(self) -> ObjectNames:
        return ObjectNames(self.name)


def labels(order_name: str, component: str) -> dict[str, str]:
    return {
        LABEL_NAME: order_name,
        LABEL_COMPONENT: component,
        LABEL_MANAGED_BY: MANAGED_BY,
        LABEL_ORDER: order_name,
    }


def selector_labels(order_name: str) -> dict[str, str]:
    return {LABEL_ORDER: order_name}


def owner_reference(order: InferenceService) -> dict[str, Any]:
    """The order as controller owner: deleting it deletes the object (garbage collection)."""
    if not order.metadata.uid:
        raise ValueError(f"order {order.metadata.name!r} has no uid")
    return {
        "apiVersion": API_VERSION,
        "kind": "InferenceService",
        "name": order.metadata.name,
        "uid": order.metadata.uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def object_meta(
    inputs: WorkloadInputs,
    name: str,
    component: str,
    annotations: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": name,
        "namespace": inputs.namespace,
        "labels": labels(inputs.name, component),
    }
    if annotations:
        meta["annotations"] = dict(sorted(annotations.items()))
    meta["ownerReferences"] = [owner_reference(inputs.order)]
    return meta


def parse_quantity(value: str | int | float) -> Fraction:
    """A Kubernetes quantity as an exact number: the server rewrites quantities in canonical form
    (``40960Mi`` comes back as ``40Gi``), so standing and desired values compare by amount. Parsed by
    ``planner.quantity``, the one home of quantities; a float counts as the decimal it prints as."""
    return Quantity.of(str(value) if isinstance(value, float) else value).value
