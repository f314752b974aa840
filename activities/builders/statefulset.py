"""The StatefulSet ``{order}``: the replicas running vLLM, each with its own model volume and devices.

Why a StatefulSet: every replica needs a model volume of its own that outlives the pod (the
artefact is tens of GiB; a restart must not download it again), which is what
``volumeClaimTemplates`` give, and each replica's devices come from its own DRA claim.

One pod is:
* init container ``model-fetcher`` — downloads the artefact into the model volume with the
  Hugging Face CLI (``hf download``, or ``huggingface-cli download`` on older images) shipped in
  the runtime image, then leaves a marker so a restart skips the network entirely. A gated
  model's token comes from the user's Secret through ``secretKeyRef`` as ``HF_TOKEN``: the
  module names the Secret and never reads its value;
* container ``runtime`` — ``vllm serve /models/<repo> --host 127.0.0.1 --port 8001
  --served-model-name <model>`` plus the recipe's arguments, offline (``HF_HUB_OFFLINE``: the
  fetcher already did the network part). The whole command line is in ``command`` so
  ``kubectl get sts -o jsonpath='{.spec.template.spec.containers[0].command}'`` shows the recipe.
  With ``authentication: Token`` the API key reaches vLLM as the ``VLLM_API_KEY`` environment
  variable from ``{order}-auth``: never ``--api-key`` on the command line, so it never appears
  in the object.
* container ``endpoint-front`` — the pod's one listener (port ``http``, 8000): it forwards what
  the endpoint publishes to the engine on the pod's loopback, with the token checked
  (``endpoint_front``: vLLM's key leaves ``/invocations`` and more open).

Failures: both containers use ``terminationMessagePolicy: FallbackToLogsOnError``, so a crash leaves
the tail of the container's log in ``lastState.terminated.message``, which the observer names on the
order (an engine that refuses a flag, a repository that answers 404).

Probes: the startup probe waits for ``/health`` with a budget that grows with the model volume
(loading and compiling a large model takes many minutes, and killing it halfway would restart
the load forever); readiness is the API itself, ``GET /v1/models``, so a replica takes traffic
only when it can answer; liveness restarts an engine whose ``/health`` stays down.

Security: the pods pass the Pod Security ``restricted`` profile. Both containers run as uid/gid
``RUNTIME_UID`` (never root), without privilege escalation, with every capability dropped and
the container runtime's default seccomp profile. ``fsGroup`` makes the model volume writable for
that uid (``OnRootMismatch``: the kubelet changes ownership once, not on every mount of tens of
GiB). What vLLM and the Hugging Face CLI write goes to volumes: the model volume (``HF_HOME``,
``VLLM_CACHE_ROOT`` with its torch.compile and Triton caches), a ``HOME`` emptyDir (the caches
libraries put under ``~``: FlashInfer, Triton, ``~/.config/vllm``) and a ``/tmp`` emptyDir.
``USER`` is set because the uid has no ``/etc/passwd`` entry in the image, and
``getpass.getuser()`` (torch's cache paths) fails without one of the two.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping, Sequence
from typing import Any

from activities.builders.auth import TOKEN_KEY, requires_token
from activities.builders.autoscaling import priority_class_name, replica_bounds
from activities.builders.claim import REPLICA_PLACEMENT_GATE, node_affinity, placement_gated
from activities.builders.common import (
    ANNOTATION_AUTH_SECRET_UID,
    ANNOTATION_CLASS_GENERATION,
    ANNOTATION_ORDER_GENERATION,
    ANNOTATION_PLACEMENT,
    ANNOTATION_RUNTIME_HOLD,
    ANNOTATION_RUNTIME_IMAGE,
    ANNOTATION_RUNTIME_VERSION,
    ANNOTATION_TEMPLATE_DIGEST,
    FETCHER_CONTAINER,
    LABEL_COMPONENT,
    LABEL_MANAGED_BY,
    MANAGED_BY,
    MODEL_MOUNT_PATH,
    MODEL_VOLUME,
    POD_CLAIM,
    PRE_STOP,
    RUNTIME_CONTAINER,
    WorkloadInputs,
    labels,
    object_meta,
    selector_labels,
)
from activities.builders.endpoint_front import engine_address_args, engine_probes, front_container
from activities.builders.fetcher import FETCH_MARKER as FETCH_MARKER
from activities.builders.fetcher import FETCH_SCRIPT as FETCH_SCRIPT
from activities.builders.move import ANNOTATION_MOVE
from activities.builders.runtime import (
    class_generation_annotation,
    order_generation_annotation,
    placement_annotation,
    pod_template_digest,
)
from inference_api.types import EndpointType, UpdateStrategy

API_KEY_ENV = "VLLM_API_KEY"
# workload.modelSource.huggingFace.caBundle: a pod annotation, projected read-only into the fetcher as a
# file (a downward API volume): no object in the order's namespace that its tenant could rewrite.
ANNOTATION_MODEL_SOURCE_CA = "ai.deckhouse.io/model-source-ca-bundle"
MODEL_SOURCE_CA_VOLUME = "model-source-ca"
MODEL_SOURCE_CA_DIR = "/etc/ai-inference/model-source-ca"
MODEL_SOURCE_CA_FILE = f"{MODEL_SOURCE_CA_DIR}/ca.crt"
# What the fetcher's HTTP clients read the bundle from: SSL_CERT_FILE (httpx, huggingface_hub 1.x and
# later; Python's ssl), REQUESTS_CA_BUNDLE and CURL_CA_BUNDLE (requests, huggingface_hub 0.x).
CA_BUNDLE_ENV = ("CURL_CA_BUNDLE", "REQUESTS_CA_BUNDLE", "SSL_CERT_FILE")
HF_TOKEN_ENV = "HF_TOKEN"
# workload.modelCache: the namespace's shared claim, mounted by the fetcher only.
MODEL_CACHE_VOLUME = "model-cache"
MODEL_CACHE_PATH = "/model-cache"
SHM_VOLUME = "dshm"

# Pod Security `restricted`: a fixed non-root uid, and what it may write.
RUNTIME_UID = 1000
RUNTIME_USER = "ai-inference"
HOME_VOLUME = "home"
HOME_PATH = "/home/ai-inference"
TMP_VOLUME = "tmp"
TMP_PATH = "/tmp"
SCRATCH_SIZE_LIMIT = "10Gi"
POD_SECURITY_CONTEXT: dict[str, Any] = {
    "runAsNonRoot": True,
    "runAsUser": RUNTIME_UID,
    "runAsGroup": RUNTIME_UID,
    "fsGroup": RUNTIME_UID,
    "fsGroupChangePolicy": "OnRootMismatch",
    "seccompProfile": {"type": "RuntimeDefault"},
}
CONTAINER_SECURITY_CONTEXT: dict[str, Any] = {
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
    "runAsNonRoot": True,
    "seccompProfile": {"type": "RuntimeDefault"},
}
# HOME and USER for both containers (see the module docstring).
_IDENTITY_ENV = {"HOME": HOME_PATH, "USER": RUNTIME_USER}
_SCRATCH_MOUNTS = [
    {"name": HOME_VOLUME, "mountPath": HOME_PATH},
    {"name": TMP_VOLUME, "mountPath": TMP_PATH},
]

# Flags the builder owns. A recipe that carried one would silently move the port, rename the
# model or put a key on the command line; they are dropped from recipe arguments.
# The service name of the engine's own spans (workload.engineOtlpTracesEndpoint, docs/tracing.md).
ENGINE_SERVICE_NAME = "ai-inference-engine"
RESERVED_FLAGS = ("--host", "--port", "--served-model-name", "--api-key", "--model")

# Startup budget: a fixed part for engine start, CUDA graph capture and compilation, and a part
# per GiB of model for reading weights into device memory on slow storage.
STARTUP_BASE_SECONDS = 600
STARTUP_SECONDS_PER_GIB = 20
STARTUP_PERIOD_SECONDS = 10


def startup_failure_threshold(model_volume_gib: int) -> int:
    budget = STARTUP_BASE_SECONDS + STARTUP_SECONDS_PER_GIB * model_volume_gib
    return math.ceil(budget / STARTUP_PERIOD_SECONDS)


def strip_reserved_flags(args: Sequence[str]) -> list[str]:
    """Recipe arguments without the flags the builder owns (``--port 1``, ``--port=1`` alike)."""
    out: list[str] = []
    skipping = False
    for arg in args:
        if skipping:
            # A flag's values run until the next option (--served-model-name takes several).
            if not arg.startswith("-"):
                continue
            skipping = False
        if arg in RESERVED_FLAGS:
            skipping = True
            continue
        if any(arg.startswith(flag + "=") for flag in RESERVED_FLAGS):
            continue
        out.append(arg)
    return out


def _has_flag(args: Sequence[str], *flags: str) -> bool:
    return any(arg == flag or arg.startswith(flag + "=") for arg in args for flag in flags)


def endpoint_args(endpoint_type: EndpointType, recipe_args: Sequence[str]) -> list[str]:
    """What makes vLLM serve the API contract the platform picked, unless the recipe says it.

    Chat is vLLM's default for a generative model. Embeddings and Rerank need the pooling runner:
    ``--runner pooling --convert embed|classify`` (classify models serve /rerank and /score).
    The shipped release (0.33) has no ``--task`` any more, so the builder never passes it.
    """
    if endpoint_type == EndpointType.CHAT or _has_flag(recipe_args, "--runner", "--convert"):
        return []
    if endpoint_type == EndpointType.EMBEDDINGS:
        return ["--runner", "pooling", "--convert", "embed"]
    return ["--runner", "pooling", "--convert", "classify"]


def runtime_command(inputs: WorkloadInputs) -> list[str]:
    recipe = inputs.plan.recipe
    recipe_args = strip_reserved_flags(recipe.args)
    command = [
        "vllm",
        "serve",
        inputs.artifact.local_dir,
        # The pod's loopback: the endpoint front is the pod's listener (endpoint_front).
        *engine_address_args(),
        "--served-model-name",
        inputs.artifact.served_name,
    ]
    command += endpoint_args(inputs.endpoint_type, recipe_args)
    if inputs.plan.deviceCount > 1 and not _has_flag(recipe_args, "--tensor-parallel-size", "-tp"):
        # Several devices per replica only help when the model is split across them.
        command += ["--tensor-parallel-size", str(inputs.plan.deviceCount)]
    traces = inputs.settings.workload.engineOtlpTracesEndpoint
    if traces and not _has_flag(recipe_args, "--otlp-traces-endpoint"):
        # The engine's own request spans (vLLM's OpenTelemetry tracing), sent to the collector.
        command += ["--otlp-traces-endpoint", traces]
    return command + recipe_args


def _runtime_env(inputs: WorkloadInputs) -> list[dict[str, Any]]:
    fixed = {
        "HF_HOME": f"{MODEL_MOUNT_PATH}/.hf-home",
        "HF_HUB_OFFLINE": "1",
        # Compilation caches on the model volume: a restarted replica skips recompiling.
        "VLLM_CACHE_ROOT": f"{MODEL_MOUNT_PATH}/.vllm-cache",
        "VLLM_NO_USAGE_STATS": "1",
        **_IDENTITY_ENV,
    }
    if inputs.settings.workload.engineOtlpTracesEndpoint:
        # The service its spans carry (OpenTelemetry's standard variable, which vLLM's SDK reads).
        fixed["OTEL_SERVICE_NAME"] = ENGINE_SERVICE_NAME
    values = {**inputs.plan.recipe.env, **fixed}
    values.pop(API_KEY_ENV, None)
    env: list[dict[str, Any]] = [{"name": key, "value": values[key]} for key in sorted(values)]
    if requires_token(inputs.service_class):
        env.append(
            {
                "name": API_KEY_ENV,
                "valueFrom": {"secretKeyRef": {"name": inputs.names.auth_secret, "key": TOKEN_KEY}},
            }
        )
    return env


def _runtime_container(inputs: WorkloadInputs) -> dict[str, Any]:
    plan = inputs.plan
    return {
        "name": RUNTIME_CONTAINER,
        "image": inputs.settings.workload.image(plan.recipe.image),
        "imagePullPolicy": "IfNotPresent",
        # A container that fails puts its log's tail in its terminated state's message: the engine's (or
        # the fetcher's) own last words reach the order's status (the observer reads them there).
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "command": runtime_command(inputs),
        "env": _runtime_env(inputs),
        "resources": {
            "requests": {"cpu": plan.cpu, "memory": plan.memory},
            # Memory is capped at the plan so one order cannot starve its neighbours on a shared
            # node; CPU is not, because throttling the engine's loop shows up as latency.
            "limits": {"memory": plan.memory},
            "claims": [{"name": POD_CLAIM}],
        },
        "volumeMounts": [
            {"name": MODEL_VOLUME, "mountPath": MODEL_MOUNT_PATH},
            {"name": SHM_VOLUME, "mountPath": "/dev/shm"},
            *copy.deepcopy(_SCRATCH_MOUNTS),
        ],
        "securityContext": copy.deepcopy(CONTAINER_SECURITY_CONTEXT),
        "lifecycle": copy.deepcopy(PRE_STOP),
        **engine_probes(inputs, startup_failure_threshold(plan.modelVolumeGiB), STARTUP_PERIOD_SECONDS),
    }


def _fetcher_container(inputs: WorkloadInputs) -> dict[str, Any]:
    artifact = inputs.artifact
    env: list[dict[str, Any]] = [
        {"name": "HF_HOME", "value": f"{MODEL_MOUNT_PATH}/.hf-home"},
        {"name": "HF_HUB_DISABLE_PROGRESS_BARS", "value": "1"},
        {"name": "HF_HUB_DISABLE_TELEMETRY", "value": "1"},
        {"name": "HF_HUB_DISABLE_UPDATE_CHECK", "value": "1"},
        {"name": "HOME", "value": _IDENTITY_ENV["HOME"]},
        {"name": "MODEL_ROOT", "value": MODEL_MOUNT_PATH},
        {"name": "MODEL_DIR", "value": artifact.local_dir},
        {"name": "MODEL_REPOSITORY", "value": artifact.repository},
        {"name": "NO_COLOR", "value": "1"},
        {"name": "USER", "value": _IDENTITY_ENV["USER"]},
    ]
    # The commit pinned when the plan was made (every replica the same weights), else the reference's own.
    revision = inputs.plan.modelCommit or artifact.revision
    if revision:
        env.append({"name": "MODEL_REVISION", "value": revision})
    auth = inputs.order.spec.model.authSecretRef
    if auth is not None:
        env.append({"name": HF_TOKEN_ENV, "valueFrom": {"secretKeyRef": {"name": auth.name, "key": auth.key}}})
    env += _model_source_env(inputs)
    mounts: list[dict[str, Any]] = [
        {"name": MODEL_VOLUME, "mountPath": MODEL_MOUNT_PATH},
        *copy.deepcopy(_SCRATCH_MOUNTS),
    ]
    if inputs.settings.workload.modelSource.huggingFace.caBundle:
        mounts.append({"name": MODEL_SOURCE_CA_VOLUME, "mountPath": MODEL_SOURCE_CA_DIR, "readOnly": True})
    if inputs.settings.workload.modelCache.enabled:
        # The namespace's model cache, for the fetcher only: the engine reads its own volume.
        mounts.append({"name": MODEL_CACHE_VOLUME, "mountPath": MODEL_CACHE_PATH})
        env.append({"name": "MODEL_CACHE_DIR", "value": MODEL_CACHE_PATH})
    return {
        "name": FETCHER_CONTAINER,
        # The runtime image carries huggingface_hub and its CLI: no second image to ship or pull.
        "image": inputs.settings.workload.image(inputs.plan.recipe.image),
        "imagePullPolicy": "IfNotPresent",
        # A container that fails puts its log's tail in its terminated state's message: the engine's (or
        # the fetcher's) own last words reach the order's status (the observer reads them there).
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "command": ["/bin/sh", "-c", FETCH_SCRIPT],
        "env": env,
        "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {"memory": "4Gi"}},
        "volumeMounts": mounts,
        "securityContext": copy.deepcopy(CONTAINER_SECURITY_CONTEXT),
    }


def _model_source_env(inputs: WorkloadInputs) -> list[dict[str, Any]]:
    """The fetcher's way to the hub (workload.modelSource.huggingFace): nothing when unset, so the pod
    template stays what it was. Proxies in both cases: Python's urllib (httpx, requests) reads the
    lower-case name first, other tools only the upper-case one."""
    source = inputs.settings.workload.modelSource.huggingFace
    values: dict[str, str] = {}
    if source.endpoint:
        values["HF_ENDPOINT"] = source.endpoint
    if source.httpsProxy:
        values |= {"HTTPS_PROXY": source.httpsProxy, "https_proxy": source.httpsProxy}
    if source.noProxy:
        hosts = ",".join(source.noProxy)
        values |= {"NO_PROXY": hosts, "no_proxy": hosts}
    if source.caBundle:
        values |= {name: MODEL_SOURCE_CA_FILE for name in CA_BUNDLE_ENV}
    return [{"name": name, "value": values[name]} for name in sorted(values)]


def _model_source_volumes(inputs: WorkloadInputs) -> list[dict[str, Any]]:
    if not inputs.settings.workload.modelSource.huggingFace.caBundle:
        return []
    field = f"metadata.annotations['{ANNOTATION_MODEL_SOURCE_CA}']"
    return [
        {
            "name": MODEL_SOURCE_CA_VOLUME,
            "downwardAPI": {"defaultMode": 0o444, "items": [{"path": "ca.crt", "fieldRef": {"fieldPath": field}}]},
        }
    ]


def _model_cache_volumes(inputs: WorkloadInputs) -> list[dict[str, Any]]:
    cache = inputs.settings.workload.modelCache
    if not cache.enabled:
        return []
    return [{"name": MODEL_CACHE_VOLUME, "persistentVolumeClaim": {"claimName": cache.claimName}}]


def build_model_cache_claim(inputs: WorkloadInputs) -> dict[str, Any] | None:
    """The namespace's model cache (``workload.modelCache``): one ReadWriteMany claim the orders of the
    namespace share. Made once and never owned by an order (it outlives each of them, as a cache of
    what they downloaded); labelled as the module's, so the worker may create it (the worker guard)
    and a tenant may not pass another claim off as it (the marks guard)."""
    cache = inputs.settings.workload.modelCache
    if not cache.enabled:
        return None
    spec: dict[str, Any] = {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": cache.size}}}
    if cache.storageClassName:
        spec["storageClassName"] = cache.storageClassName
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {
            "name": cache.claimName,
            "namespace": inputs.namespace,
            "labels": {LABEL_MANAGED_BY: MANAGED_BY, LABEL_COMPONENT: "model-cache"},
        },
        "spec": spec,
    }


def new_model_volume_template(inputs: WorkloadInputs) -> dict[str, Any]:
    spec: dict[str, Any] = {"accessModes": ["ReadWriteOnce"]}
    storage_class = inputs.service_class.spec.modelStorageClassName
    if storage_class:
        spec["storageClassName"] = storage_class
    spec["resources"] = {"requests": {"storage": f"{inputs.plan.modelVolumeGiB}Gi"}}
    return {"metadata": {"name": MODEL_VOLUME, "labels": labels(inputs.name, "model")}, "spec": spec}


def volume_claim_templates(inputs: WorkloadInputs) -> list[dict[str, Any]]:
    """The standing templates verbatim when a StatefulSet stands, else a new model volume.

    The server refuses any change to the claim templates of a standing StatefulSet, and a volume
    never moves to another StorageClass anyway; so the standing ones are re-applied exactly as
    read (see ``objects.storage_class_kept`` for the SettledRegionKept event).
    """
    standing = inputs.standing_statefulset
    if standing is not None:
        templates = (standing.get("spec") or {}).get("volumeClaimTemplates")
        if templates:
            return copy.deepcopy(list(templates))
    return [new_model_volume_template(inputs)]


def _update_strategy(inputs: WorkloadInputs) -> dict[str, Any]:
    if inputs.hold_running_replicas:
        return {"type": UpdateStrategy.ON_DELETE.value}
    strategy = inputs.service_class.spec.updatePolicy.strategy
    shape = inputs.set_shape
    if strategy == UpdateStrategy.ROLLING_UPDATE and shape is not None and shape.partition:
        # A move surges (builders/move.py): the new template reaches the new replicas only.
        return {"type": strategy.value, "rollingUpdate": {"partition": shape.partition}}
    if strategy == UpdateStrategy.ROLLING_UPDATE:
        # The partition named: with no rollingUpdate, the StatefulSet controller makes a replica that
        # went (the observer deleted it for a stale claim) from the revision the set's status last
        # counted, not from the template — the old placement again, deleted again, and the set never
        # reaches the new template (tests/cluster/test_statefulset_update.py).
        return {"type": strategy.value, "rollingUpdate": {"partition": 0}}
    return {"type": strategy.value}


def _workload_scheduling(inputs: WorkloadInputs) -> dict[str, Any]:
    """The module settings' pull secrets, nodeSelector and tolerations (workload.*); none by default."""
    workload = inputs.settings.workload
    fields: dict[str, Any] = {}
    if workload.imagePullSecrets:
        fields["imagePullSecrets"] = [{"name": name} for name in workload.imagePullSecrets]
    if workload.nodeSelector:
        fields["nodeSelector"] = dict(sorted(workload.nodeSelector.items()))
    if workload.tolerations:
        fields["tolerations"] = copy.deepcopy(workload.tolerations)
    return fields


def build_statefulset(inputs: WorkloadInputs) -> dict[str, Any]:
    plan = inputs.plan
    bounds = replica_bounds(inputs.service_class, inputs.replica_ceiling)
    placement = placement_annotation(plan)
    pod_annotations: Mapping[str, str] = {
        "kubectl.kubernetes.io/default-container": RUNTIME_CONTAINER,
        ANNOTATION_ORDER_GENERATION: order_generation_annotation(inputs.order),
        ANNOTATION_PLACEMENT: placement,
        ANNOTATION_RUNTIME_IMAGE: plan.recipe.image,
        ANNOTATION_RUNTIME_VERSION: plan.recipe.runtimeVersion,
    }
    if inputs.auth_secret_uid:
        pod_annotations = {**pod_annotations, ANNOTATION_AUTH_SECRET_UID: inputs.auth_secret_uid}
    ca_bundle = inputs.settings.workload.modelSource.huggingFace.caBundle
    if ca_bundle:
        pod_annotations = {**pod_annotations, ANNOTATION_MODEL_SOURCE_CA: ca_bundle}
    pod_spec: dict[str, Any] = {}
    priority = priority_class_name(inputs.service_class)
    if priority:
        pod_spec["priorityClassName"] = priority
    pod_spec |= {
        # The runtime never talks to the API server.
        "automountServiceAccountToken": False,
        # Service links would inject <SERVICE>_PORT variables; a Service named `vllm` in the
        # namespace would set VLLM_PORT, which vLLM reads as its own setting and fails on.
        "enableServiceLinks": False,
        "terminationGracePeriodSeconds": 60,
        "securityContext": copy.deepcopy(POD_SECURITY_CONTEXT),
        "resourceClaims": [{"name": POD_CLAIM, "resourceClaimTemplateName": inputs.names.claim_template}],
        "initContainers": [_fetcher_container(inputs)],
        "containers": [
            _runtime_container(inputs),
            front_container(inputs, inputs.settings.workload.image(plan.recipe.image), CONTAINER_SECURITY_CONTEXT),
        ],
        "volumes": [
            {
                # The 64Mi default /dev/shm is too small for vLLM's worker processes and NCCL.
                "name": SHM_VOLUME,
                "emptyDir": {"medium": "Memory", "sizeLimit": "2Gi" if plan.deviceCount == 1 else "8Gi"},
            },
            # Writable scratch for the non-root uid: HOME (library caches) and /tmp.
            {"name": HOME_VOLUME, "emptyDir": {"sizeLimit": SCRATCH_SIZE_LIMIT}},
            {"name": TMP_VOLUME, "emptyDir": {"sizeLimit": SCRATCH_SIZE_LIMIT}},
            *_model_source_volumes(inputs),
            *_model_cache_volumes(inputs),
        ],
    }
    pod_spec |= _workload_scheduling(inputs)
    affinity = node_affinity(inputs)  # the plan's nodes: required when pinned, preferred when steered
    if affinity is not None:
        pod_spec["affinity"] = affinity
    if placement_gated(inputs):
        # Each replica waits for the observer's replica placer to allocate its claim on a chosen device.
        pod_spec["schedulingGates"] = [{"name": REPLICA_PLACEMENT_GATE}]
    spec: dict[str, Any] = {"serviceName": inputs.names.service}
    if not bounds.autoscaled:
        # With an HPA the field is left out: the HPA writes replicas through the scale
        # subresource, and a server-side apply that also set it would reset it on every apply.
        spec["replicas"] = bounds.min
    shape = inputs.set_shape
    if shape is not None:
        if not bounds.autoscaled:
            spec["replicas"] = shape.replicas
        if shape.firstOrdinal:
            # Once a move raised it, the first ordinal stays: lowering it would replace every replica.
            spec["ordinals"] = {"start": shape.firstOrdinal}
    spec |= {
        "selector": {"matchLabels": selector_labels(inputs.name)},
        # Replicas load their models independently; OrderedReady would make the fourth wait for
        # three model loads in a row.
        "podManagementPolicy": "Parallel",
        "updateStrategy": _update_strategy(inputs),
        # Deleting the workload (the order) deletes the volumes; scaling down keeps them so a
        # replica that comes back finds its model already downloaded.
        "persistentVolumeClaimRetentionPolicy": {"whenDeleted": "Delete", "whenScaled": "Retain"},
        "template": {
            "metadata": {
                "labels": labels(inputs.name, "runtime"),
                "annotations": dict(sorted(pod_annotations.items())),
            },
            "spec": pod_spec,
        },
        "volumeClaimTemplates": volume_claim_templates(inputs),
    }
    annotations = {
        **({ANNOTATION_MOVE: shape.record.encode()} if shape is not None and shape.record is not None else {}),
        ANNOTATION_PLACEMENT: placement,
        ANNOTATION_RUNTIME_HOLD: "true" if inputs.hold_running_replicas else "false",
        ANNOTATION_TEMPLATE_DIGEST: pod_template_digest(spec["template"]),
        ANNOTATION_CLASS_GENERATION: class_generation_annotation(inputs.service_class),
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": object_meta(inputs, inputs.names.statefulset, "runtime", annotations),
        "spec": spec,
    }
