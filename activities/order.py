"""The order workflow's activities: thin I/O around the pure builders, checks and the planner.

Secrets: the auth token is generated and written here and read back only to probe; the user's
HF token is never read (its Secret is only checked for existence and key). Neither is logged,
returned, or put in an exception message.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import httpx
import structlog
from kubernetes.client import ApiClient, AppsV1Api, CoreV1Api, CustomObjectsApi
from kubernetes.client.exceptions import ApiException
from kubernetes.dynamic.exceptions import ConflictError as DynamicConflictError
from opentelemetry import trace
from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.builders.auth import build_auth_secret, new_token, requires_token
from activities.builders.autoscaling import constraints_status, replica_bounds
from activities.builders.claim import claim_template_spec_differs
from activities.builders.common import (
    ANNOTATION_PLACEMENT,
    ANNOTATION_PRUNED_FOR,
    ANNOTATION_TEMPLATE_DIGEST,
    FIELD_MANAGER,
    LABEL_ENDPOINT_HOST,
    LABEL_ORDER,
    ObjectNames,
    UnsupportedModelSourceError,
    WorkloadInputs,
    artifact_for_order,
    artifact_from_resolution,
    parse_catalog_source,
    selector_labels,
)
from activities.builders.exposure import (
    certificate_copy_allowed,
    custom_certificate_source,
    endpoint_status,
    host_digest,
    host_taken,
)
from activities.builders.move import MoveStep, SetShape, decide_move, move_allowed, withdrawn_message
from activities.builders.objects import (
    OWNED_KINDS,
    DesiredObject,
    desired_objects,
    possible_names,
    pruned_set_digest,
    settled_region_kept_message,
    storage_class_kept,
    unwanted_objects,
    wanted_names,
    wanted_set_digest,
    with_annotation,
)
from activities.builders.runtime import (
    RuntimeVerdict,
    decide_runtime_hold,
    decide_template_hold,
    placement_changed,
    replica_revisions,
    replica_runtime_versions,
    runtime_current,
    volume_must_grow,
)
from activities.builders.statefulset import build_statefulset, volume_claim_templates
from activities.catalog import KubernetesCatalogReader, lookup_model, model_resolution
from activities.health import probe_models, probe_target, token_from_secret
from activities.kube import Applier, refusals_are_final, watch_events
from activities.metrics import GPUS_WON_BACK
from activities.model_revision import pin_revision
from activities.order_cache import CACHE_READS, OrderCacheView, class_fresh_enough, order_fresh_enough
from activities.order_events import EventRecorder, step_events
from activities.plan_seal import SealKey, seal_problem, sealed
from activities.preemption_ledger import CeilingReader
from activities.release import order_timings, release_fingerprint
from activities.scaling import order_pods
from activities.trusted_apply import (
    Ownership,
    decoys,
    foreign_message,
    held_model_differs,
    left_behind,
    order_problem,
    ownership,
    plan_policy_problem,
    recipe_facts,
    recipe_problem,
    resolution_problem,
    runs_already,
    trusted_order,
    verified_ceiling,
    workload_sizing,
)
from activities.trusted_status import being_deleted, says_deleting, trusted_event, trusted_status
from inference_api.payloads import (
    STATUS_UPDATE_NOT_WRITTEN,
    ApplyInput,
    ApplyResult,
    ModelResolution,
    OrderEvent,
    OrderRead,
    OrderRef,
    OrderSnapshot,
    PlanInput,
    ProbeInput,
    ProbeResult,
    StatusUpdate,
)
from inference_api.plan import LaunchPlan, PlanOutcome, PlanRefusal
from inference_api.preemption import preemption_workflow_id
from inference_api.reasons import STATE_REFUSED, Reason
from inference_api.settings import ModuleSettings
from inference_api.types import (
    CLASSES,
    GROUP,
    ORDERS,
    VERSION,
    ConditionStatus,
    InferenceService,
    InferenceServiceClass,
    ModelSource,
)
from planner.recipes import load_recipe_book
from planner.scaling import autoscaled
from workflows import activity_names as act
from workflows.validation import check_class, check_model_policy

log = structlog.get_logger(__name__)

FINALIZER = "ai.deckhouse.io/inference-service"
JSON_PATCH = "application/json-patch+json"
# Orders whose last status write this process remembers (publish_status: the step Events' "before").
WRITTEN_KEPT = 20_000
# The first pause of await_serving between looks for a ready replica (it doubles up to serveRetrySeconds).
FIRST_SERVE_LOOK_SECONDS = 0.5


def _refused(message: str) -> ApplicationError:
    """An apply that must not write: WorkloadRefused (non-retryable), the workflow waits for a change."""
    return ApplicationError(message, type=str(Reason.WORKLOAD_REFUSED), non_retryable=True)


def _distrusted(message: str) -> ApplicationError:
    """An apply that refuses the run's own state (plan, recipe, resolution, held spec): nothing is
    written, and the workflow plans again from the cluster (non-retryable: the same state is refused)."""
    return ApplicationError(message, type=STATE_REFUSED, non_retryable=True)


def fetchable(resolution: ModelResolution, name: str) -> ModelResolution:
    """A resolved catalog model whose source the model fetcher cannot download (not a Hugging Face
    repository: ``s3://…``, ``ollama://…``) is refused here, in the model step, with the reason and
    what to do — before, the apply raised on it and was retried with no status, for ever."""
    if resolution.refusal is not None or resolution.source is None:
        return resolution
    try:
        parse_catalog_source(resolution.source)
    except UnsupportedModelSourceError as err:
        return resolution.model_copy(
            update={
                "refusal": Reason.UNSUPPORTED_MODEL_SOURCE,
                "message": f"catalog model {name!r}: {err}. Serve a catalog model whose source is a Hugging Face "
                "repository (hf://org/repo), or order the repository directly (src: HuggingFace)",
            }
        )
    return resolution


def _run_id() -> str:
    """The workflow run that asked (named in the log line of a refusal); empty outside an activity."""
    try:
        return activity.info().workflow_run_id or ""
    except RuntimeError:
        return ""


def _ready_of(statefulset: dict[str, Any]) -> int:
    return int((statefulset.get("status") or {}).get("readyReplicas") or 0)


PlanFunction = Callable[[PlanInput], PlanOutcome]


class OrderActivities:
    """One instance per worker; its methods are the registered activities."""

    def __init__(
        self, api: ApiClient, settings: ModuleSettings, planner: PlanFunction, cache: OrderCacheView | None = None
    ) -> None:
        self.api = api
        self.settings = settings
        self.planner = planner
        self.core = CoreV1Api(api)
        self.apps = AppsV1Api(api)
        self.custom = CustomObjectsApi(api)
        self.applier = Applier(api)
        self.catalog_reader = KubernetesCatalogReader(api, settings.aiModels.catalogLookup.timeoutSeconds)
        # What each preemption run told every order, kept across applies (reads only new events).
        self.ceilings = CeilingReader()
        # The key the planner's answers are sealed with (read or made at the first plan or apply).
        self.seal_key = SealKey(self.core, settings.moduleNamespace)
        # Events of the orders' steps, kept by this process (aggregation and rate limit).
        self.events = EventRecorder(self.core, order_event_body)
        # The worker's informer cache of orders and classes (activities/order_cache.py); None: every read a GET.
        self.cache = cache
        # The conditions this process last wrote on each order (by uid), and the resourceVersions of the
        # order before and after the write: a cache still behind that write is not the "before" of the
        # next one (the step Events would be told twice).
        self._written: OrderedDict[str, tuple[str | None, str | None, Any]] = OrderedDict()

    def all(self) -> list[Callable[..., Any]]:
        return [
            self.read_order,
            self.ensure_finalizer,
            self.resolve_model,
            self.plan_launch,
            self.apply_workload,
            self.await_serving,
            self.probe_serving,
            self.publish_status,
            self.record_event,
            self.finalize_order,
        ]

    # ------------------------------------------------------------------ reads

    def _cached_order(self, ref: OrderRef, generation: int | None, deleting: bool = False) -> dict[str, Any] | None:
        """The order from the informer cache when it is fresh enough for the read (activities/order_cache.py);
        None: read it from the API server."""
        if self.cache is None or not self.cache.synced():
            CACHE_READS.labels("order", "miss").inc()
            return None
        obj = self.cache.order(ref.namespace, ref.name)
        fresh = order_fresh_enough(obj, ref.uid, generation, deleting)
        CACHE_READS.labels("order", "hit" if fresh else "miss").inc()
        return obj if fresh else None

    def _cached_class(self, name: str, generation: int | None, first_read: bool = False) -> dict[str, Any] | None:
        if self.cache is None or not self.cache.synced():
            CACHE_READS.labels("class", "miss").inc()
            return None
        obj = self.cache.order_class(name)
        fresh = class_fresh_enough(obj, generation, first_read)
        CACHE_READS.labels("class", "hit" if fresh else "miss").inc()
        return obj if fresh else None

    def _read_order_object(self, ref: OrderRef) -> dict[str, Any] | None:
        try:
            obj = self.custom.get_namespaced_custom_object(GROUP, VERSION, ref.namespace, ORDERS, ref.name)
        except ApiException as err:
            if err.status == 404:
                return None
            raise
        # Same name, other uid: the order was deleted and made again; that one has its own workflow.
        if not isinstance(obj, dict) or obj.get("metadata", {}).get("uid") != ref.uid:
            return None
        return obj

    @activity.defn(name=act.READ_ORDER)
    def read_order(self, ref: OrderRead) -> OrderSnapshot:
        obj = self._cached_order(ref, ref.generation, ref.deleting) or self._read_order_object(ref)
        if obj is None:
            return OrderSnapshot()
        order = InferenceService.model_validate(obj)
        cls_name = order.spec.inferenceServiceClassName
        cached_cls = self._cached_class(cls_name, ref.classGeneration, ref.firstClassRead)
        cls = InferenceServiceClass.model_validate(cached_cls) if cached_cls is not None else self._read_class(cls_name)
        return OrderSnapshot(
            order=order, cls=cls, timings=order_timings(self.settings), release=release_fingerprint(self.settings)
        )

    @activity.defn(name=act.ENSURE_FINALIZER)
    def ensure_finalizer(self, ref: OrderRef) -> None:
        cached = self._cached_order(ref, 0)
        if cached is not None and FINALIZER in (cached["metadata"].get("finalizers") or []):
            return  # already there (a finalizer the cache shows is never taken back by a stale read)
        obj = self._read_order_object(ref)
        if obj is None or obj["metadata"].get("deletionTimestamp"):
            return
        finalizers = obj["metadata"].get("finalizers") or []
        if FINALIZER in finalizers:
            return
        patch: list[dict[str, Any]] = [{"op": "test", "path": "/metadata/uid", "value": ref.uid}]
        if finalizers:
            patch.append({"op": "add", "path": "/metadata/finalizers/-", "value": FINALIZER})
        else:
            patch.append({"op": "add", "path": "/metadata/finalizers", "value": [FINALIZER]})
        self.custom.patch_namespaced_custom_object(
            GROUP, VERSION, ref.namespace, ORDERS, ref.name, patch, _content_type=JSON_PATCH
        )

    @activity.defn(name=act.FINALIZE_ORDER)
    def finalize_order(self, ref: OrderRef) -> None:
        """Last step of a deletion: the owned objects go by garbage collection once the order goes."""
        obj = self._read_order_object(ref)
        if obj is None:
            return
        if not being_deleted(obj):
            # A run told to delete an order the API server does not delete (a forged state, or an
            # activity task answered by hand): nothing goes, and the order keeps its finalizer.
            log.warning("finalize refused: the order is not being deleted", order=ref.key, run=_run_id())
            return
        finalizers = obj["metadata"].get("finalizers") or []
        if FINALIZER not in finalizers:
            return
        self._delete_left_behind(ref)
        index = finalizers.index(FINALIZER)
        patch = [
            {"op": "test", "path": f"/metadata/finalizers/{index}", "value": FINALIZER},
            {"op": "remove", "path": f"/metadata/finalizers/{index}"},
        ]
        self.custom.patch_namespaced_custom_object(
            GROUP, VERSION, ref.namespace, ORDERS, ref.name, patch, _content_type=JSON_PATCH
        )
        log.info("order finalized", order=ref.key)

    def _delete_left_behind(self, ref: OrderRef) -> None:
        """What the order owned goes with it, explicitly (each object by its uid): garbage collection
        alone leaves nothing after ``kubectl delete --cascade=orphan``, which strips the ownerReferences
        instead — that would leave a GPU workload and a public Ingress with no owner. Objects carrying
        the order's labels that the module did not make for it are left alone (``left_behind``)."""
        for api_version, kind in OWNED_KINDS:
            standing = self._standing(api_version, kind, ref.namespace, ref.name)
            for gone in left_behind(standing, ref.name, ref.uid):
                if self.applier.delete(api_version, kind, gone["name"], ref.namespace, uid=gone["uid"]):
                    log.info("deleted with its order", order=ref.key, kind=kind, name=gone["name"])

    # ----------------------------------------------------------------- model

    @activity.defn(name=act.RESOLVE_MODEL)
    async def resolve_model(self, order: InferenceService) -> ModelResolution:
        model = order.spec.model
        namespace = order.metadata.namespace or ""
        if model.src == ModelSource.AI_MODELS:
            outcome = await lookup_model(model.ref, namespace, self.settings, self.catalog_reader)
            return fetchable(model_resolution(outcome, model.ref), model.ref.name)
        if model.authSecretRef is not None:
            problem = await asyncio.to_thread(
                self._auth_secret_problem, namespace, model.authSecretRef.name, model.authSecretRef.key
            )
            if problem:
                return ModelResolution(
                    servedName=model.ref.name,
                    refusal=Reason.AUTH_SECRET_NOT_FOUND,
                    message=problem,
                    retryAfterSeconds=self.settings.aiModels.catalogLookup.notReadyRequeueSeconds,
                )
        # A bare Hugging Face reference carries no facts: the class's whole contract list stands.
        return ModelResolution(servedName=model.ref.name, source=model.ref.name)

    def _auth_secret_problem(self, namespace: str, name: str, key: str) -> str | None:
        try:
            secret = self.core.read_namespaced_secret(name, namespace)
        except ApiException as err:
            if err.status == 404:
                return (
                    f"spec.model.authSecretRef names Secret {name!r}, which does not exist in namespace "
                    f"{namespace!r}. Create it with the Hugging Face token under key {key!r}."
                )
            raise
        if key not in (secret.data or {}):
            return f"Secret {name!r} has no key {key!r}; put the Hugging Face token there or set authSecretRef.key."
        return None

    # ------------------------------------------------------------------ plan

    @activity.defn(name=act.PLAN_LAUNCH)
    def plan_launch(self, request: PlanInput) -> PlanOutcome:
        """The planner's answer, sealed for this order: the apply writes only a plan this worker sealed."""
        outcome = self.planner(request)
        if outcome.plan is None:
            return outcome
        plan, refusal = self._pinned(request, outcome.plan)
        if refusal is not None:
            return PlanOutcome(refusal=refusal)
        return outcome.model_copy(update={"plan": sealed(plan, request.ref.uid, self.seal_key())})

    def _pinned(self, request: PlanInput, plan: LaunchPlan) -> tuple[LaunchPlan, PlanRefusal | None]:
        """The plan with the commit its replicas fetch (activities/model_revision.py): the current plan's
        when the plan is made again for the same spec, else asked of the hub now."""
        if request.keepRevision and request.current is not None:
            kept = {"modelCommit": request.current.modelCommit, "modelNotPinned": request.current.modelNotPinned}
            return plan.model_copy(update=kept), None
        source = self.settings.workload.modelSource.huggingFace
        if not source.pinRevision:
            off = "workload.modelSource.huggingFace.pinRevision is off: each replica resolves the reference"
            return plan.model_copy(update={"modelCommit": None, "modelNotPinned": off}), None
        try:
            artifact = artifact_for_order(request.order, catalog_source=request.source, served_name=request.servedName)
        except UnsupportedModelSourceError:
            return plan, None  # refused at resolution; nothing to pin
        pinned = pin_revision(
            source,
            artifact.repository,
            artifact.revision,
            has_token=request.order.spec.model.authSecretRef is not None,
        )
        if pinned.refusal is not None:
            return plan, PlanRefusal(reason=pinned.refusal, message=pinned.message)
        if pinned.commit is None:
            log.info("model revision not pinned", order=request.ref.key, why=pinned.message)
        update = {"modelCommit": pinned.commit, "modelNotPinned": None if pinned.commit else pinned.message}
        return plan.model_copy(update=update), None

    # ----------------------------------------------------------------- apply

    @activity.defn(name=act.APPLY_WORKLOAD)
    async def apply_workload(self, request: ApplyInput) -> ApplyResult:
        """The order's workload, derived now from the order (read by uid), its class, the release's recipe
        tables and the preemption ledger; the workflow's request is checked against them, never believed
        (see activities/trusted_apply.py). A check that fails is WorkloadRefused: nothing is written."""
        trusted, held = await self._trusted(request)
        # Only autoscaled orders take part in preemption (they alone report to it): no ceiling otherwise.
        ceiling = await self._verified_ceiling(request) if autoscaled(trusted.cls) else None
        trusted = trusted.model_copy(update={"replicaCeiling": ceiling})
        return await asyncio.to_thread(self.apply_request, trusted, True, held)

    async def _trusted(self, request: ApplyInput) -> tuple[ApplyInput, bool]:
        """The request rebuilt from the order read by uid and its class; True when the workflow holds
        another model than the order names (allowed only for what already runs, see ``_verify_workload``)."""
        ref = request.ref
        # The cache's copy is the API server's too, only at least as new as the spec the run holds (a
        # forged run's generation can make the read older, never other: content comes from the cluster).
        live_obj = self._cached_order(ref, request.order.metadata.generation or 0)
        if live_obj is None:
            live_obj = await asyncio.to_thread(self._read_any_order, ref)
        if (problem := order_problem(live_obj, ref.namespace, ref.name, ref.uid)) is not None:
            raise _refused(problem)
        assert live_obj is not None
        live = InferenceService.model_validate(live_obj)
        cls_name = live.spec.inferenceServiceClassName
        held_cls = request.cls.metadata.generation if request.cls is not None else None
        cached_cls = (
            self._cached_class(cls_name, held_cls)
            if request.cls is not None and request.cls.metadata.name == cls_name
            else None
        )
        cls = (
            InferenceServiceClass.model_validate(cached_cls)
            if cached_cls is not None
            else await asyncio.to_thread(self._read_class, cls_name)
        )
        if (refusal := check_class(live, cls)) is not None or cls is None:
            raise _refused(f"{refusal.reason}: {refusal.message}" if refusal else "the order's class is gone")
        order = trusted_order(live, request.order)
        if order.spec.model.src == ModelSource.HUGGING_FACE:
            if (problem := resolution_problem(order, request.resolution)) is not None:
                raise _distrusted(problem)
            resolution = request.resolution
        else:
            # A catalog model is resolved again: its origin (what the fetcher downloads) and facts are the
            # catalog's, not the workflow's.
            resolution = await self.resolve_model(order)
            if resolution.refusal is not None and resolution.retryAfterSeconds:
                # The catalog did not answer (a blip): the apply is tried again, never refused for good.
                raise ApplicationError(
                    f"the catalog did not answer: {resolution.refusal}: {resolution.message}", type="CatalogUnavailable"
                )
            if resolution.refusal is not None:
                raise _refused(f"{resolution.refusal}: {resolution.message}")
        if (refusal := check_model_policy(order, cls, resolution.facts)) is not None:
            raise _refused(f"{refusal.reason}: {refusal.message}")
        trusted = request.model_copy(update={"order": order, "cls": cls, "resolution": resolution})
        return trusted, held_model_differs(live, request.order)

    def _read_any_order(self, ref: OrderRef) -> dict[str, Any] | None:
        try:
            obj = self.custom.get_namespaced_custom_object(GROUP, VERSION, ref.namespace, ORDERS, ref.name)
        except ApiException as err:
            if err.status == 404:
                return None
            raise
        return obj if isinstance(obj, dict) else None

    def _read_class(self, name: str) -> InferenceServiceClass | None:
        try:
            return InferenceServiceClass.model_validate(
                self.custom.get_cluster_custom_object(GROUP, VERSION, CLASSES, name)
            )
        except ApiException as err:
            if err.status == 404:
                return None
            raise

    async def _verified_ceiling(self, request: ApplyInput) -> int | None:
        """The donor ceiling the device class's preemption workflow told this order, whatever the request
        says (a ``set_replica_ceiling`` signal can be sent by hand). Read from that workflow's history, not
        asked of it: the answer does not wait on its worker; only the events since this process last
        read are read (activities/preemption_ledger.py)."""
        info = activity.info()
        preemption = preemption_workflow_id(info.task_queue, request.plan.deviceClass)
        order_workflow = info.workflow_id or ""
        told = await self.ceilings.ceiling(activity.client(), preemption, order_workflow)
        ceiling = verified_ceiling({order_workflow: told} if told is not None else None, order_workflow)
        if ceiling != request.replicaCeiling:
            log.warning(
                "replica ceiling not verified: the preemption ledger's is applied",
                order=request.ref.key,
                asked=request.replicaCeiling,
                ledger=ceiling,
            )
        return ceiling

    def apply_request(self, request: ApplyInput, verify: bool = False, held_model: bool = False) -> ApplyResult:
        """Apply what ``request`` describes. ``verify``: the request was made by ``_trusted`` and the recipe
        and any held spec are checked against the release and the standing workload before a write."""
        order, cls, plan = request.order, request.cls, request.plan
        ns, name = request.ref.namespace, request.ref.name
        standing = self.applier.get("apps/v1", "StatefulSet", name, ns)
        standing_is_ours = ownership(standing, name, request.ref.uid) == Ownership.OURS
        pods = self.core.list_namespaced_pod(
            ns, label_selector=",".join(f"{k}={v}" for k, v in selector_labels(name).items())
        )
        # The runtime releases the order's own replicas run: pods along the controller chain only (a pod
        # someone labelled as the order's must not decide whether its replicas are held).
        listed = [self.api.sanitize_for_serialization(p) for p in pods.items]
        replicas = order_pods(listed, request.ref.uid, standing)
        versions = replica_runtime_versions(replicas)
        ours = standing if standing_is_ours else None
        first_seen = ours  # before a volume rebuild deletes it: its record of the last prune
        kept = storage_class_kept(ours, cls)
        inputs = WorkloadInputs(
            order=order,
            service_class=cls,
            plan=plan,
            settings=self.settings,
            endpoint_type=request.endpointType,
            artifact=artifact_from_resolution(order, request.resolution),
            standing_statefulset=ours,
            hold_running_replicas=decide_runtime_hold(order, plan, ours, versions),
            replica_ceiling=request.replicaCeiling,
        )
        if verify:
            self._verify_workload(request, inputs, ours, held_model)
        # Judged on the standing workload, before a volume rebuild deletes it (it said RuntimeUpToDate).
        moved = placement_changed(ours, plan)
        grown = ours is not None and volume_must_grow(ours, plan)
        if ours is not None and grown:
            # Claim templates are immutable: a larger model volume means a new StatefulSet.
            self.applier.delete("apps/v1", "StatefulSet", name, ns, uid=ours["metadata"]["uid"])
            ours = None
            inputs = dataclasses.replace(inputs, standing_statefulset=None)
        if requires_token(cls):
            # The token Secret first: the pods name its uid, so a rotated token (the Secret deleted and
            # made anew) rolls the replicas onto the new key.
            secret = self.applier.get("v1", "Secret", inputs.names.auth_secret, ns)
            if secret is None:
                auth = build_auth_secret(inputs, new_token())
                if auth is not None:
                    self._still_the_order(request.ref)
                    with refusals_are_final():
                        secret = self._create_once(auth)
                if secret is None:  # none to make (no token asked), or made meanwhile by another apply
                    secret = self.applier.get("v1", "Secret", inputs.names.auth_secret, ns)
            if secret is not None and ownership(secret, name, request.ref.uid) != Ownership.OURS:
                raise _refused(foreign_message("Secret", ns, inputs.names.auth_secret, secret))
            inputs = dataclasses.replace(inputs, auth_secret_uid=((secret or {}).get("metadata") or {}).get("uid"))
        # The module's own template changes (an upgrade's front, annotations, fetcher, a setting) reach
        # new replicas only: the set is held like a runtime upgrade (builders/runtime.py).
        built = build_statefulset(inputs)
        template_hold = decide_template_hold(
            order,
            cls,
            plan,
            inputs.standing_statefulset,
            built["metadata"]["annotations"][ANNOTATION_TEMPLATE_DIGEST],
            inputs.auth_secret_uid,
            replica_revisions(replicas),
        )
        if template_hold and not inputs.hold_running_replicas:
            inputs = dataclasses.replace(inputs, hold_running_replicas=True)
        bounds = replica_bounds(cls, request.replicaCeiling)
        shape = decide_move(
            inputs.standing_statefulset,
            replicas=bounds.min,
            template=built["metadata"]["annotations"][ANNOTATION_TEMPLATE_DIGEST],
            plan=plan,
            asked=request.makeBeforeBreak,
            allowed=move_allowed(cls, autoscaled=bounds.autoscaled, held=inputs.hold_running_replicas),
            moved=request.makeBeforeBreak,
            now=time.time(),
        )
        inputs = dataclasses.replace(inputs, set_shape=shape)
        if shape.step is not MoveStep.NONE:
            log.info("move", order=request.ref.key, step=str(shape.step), first_ordinal=shape.firstOrdinal)
        certificate = None
        source = custom_certificate_source(cls, self.settings)
        if source is not None:
            certificate = self.applier.get("v1", "Secret", source[1], source[0])
            if (refusal := certificate_copy_allowed(certificate)) is not None:
                raise ApplicationError(refusal, type=str(Reason.WORKLOAD_REFUSED), non_retryable=True)
        desired = desired_objects(inputs, auth_token=None, custom_certificate=certificate)
        ingress = next((w for w in desired if w.kind == "Ingress"), None)
        if ingress is not None:
            self._claim_host(request.ref, ingress.body)
        applied_statefulset: dict[str, Any] | None = None
        # Before the first object the loop creates: the order still stands with this uid. Once for the
        # loop's straight run of writes, not before each (an object made for an order deleted within it
        # names the old uid, and the garbage collector removes it).
        confirm = _once(lambda: self._still_the_order(request.ref))
        wanted_set = wanted_names(desired, cls, inputs.names)
        pruned_for = wanted_set_digest(wanted_set, release_fingerprint(self.settings))
        with refusals_are_final():
            for wanted in desired:
                if wanted.create_only:
                    self._create_once(wanted.body)
                    continue
                known: dict[str, Any] | Absent | None = None
                body = wanted.body
                if wanted.kind == "ResourceClaimTemplate":
                    found = self.applier.get(wanted.api_version, wanted.kind, wanted.name, ns)
                    known = found if found is not None else ABSENT
                    if (
                        ownership(found, name, request.ref.uid) == Ownership.OURS
                        and found is not None
                        and claim_template_spec_differs(found, wanted.body)
                    ):
                        # Its spec is immutable: a new share or device class replaces the template.
                        uid = found["metadata"]["uid"]
                        self.applier.delete(wanted.api_version, wanted.kind, wanted.name, ns, uid=uid)
                        known = None  # read again: a deletion may still be under way
                elif wanted.kind == "StatefulSet":
                    # Read at the start of this apply (its resourceVersion goes with the write); not there
                    # then, it is not read again.
                    known = ours if standing is not None else ABSENT
                    if pruned_set_digest(first_seen) != pruned_for:
                        # The prune lists every kind an order can own: only when what the order should own
                        # (or the release) changed since the last one finished. Before the set's write, which
                        # records it: a prune cut short is done again by the next apply.
                        self._prune(request, wanted_set, by_name=standing is None)
                    body = with_annotation(wanted.body, ANNOTATION_PRUNED_FOR, pruned_for)
                result = self._apply_owned(request.ref, dataclasses.replace(wanted, body=body), known, confirm)
                if wanted.kind == "StatefulSet":
                    applied_statefulset = result
            if applied_statefulset is None:
                self._prune(request, wanted_set)  # no set to record it on: every apply prunes
        surging = shape.step in (MoveStep.SURGE, MoveStep.HOLD)
        # A move made before it breaks keeps the replicas that serve: nothing is rebuilt.
        verdict = runtime_current(plan.recipe.runtimeVersion, versions, moved and not surging)
        if shape.step is MoveStep.RETIRE:
            self._retire_moved(request, inputs, shape)
        if (withdrawn := withdrawn_message(shape, plan.recipe.runtimeVersion)) is not None:
            # The surge already wrote the new placement on the set: only the withdraw knows the old
            # replicas now roll onto it (break, then make).
            verdict = RuntimeVerdict(ConditionStatus.FALSE, Reason.WORKLOAD_REBUILDING, withdrawn)
        if grown:
            verdict = RuntimeVerdict(
                ConditionStatus.FALSE,
                Reason.WORKLOAD_REBUILDING,
                f"The model needs a {plan.modelVolumeGiB} GiB volume, larger than the standing one, and a volume "
                "cannot grow in place (claim templates are immutable): the workload is rebuilt and the model "
                f"loaded again, on runtime release {plan.recipe.runtimeVersion}.",
            )
        statefulset = applied_statefulset or self.applier.get("apps/v1", "StatefulSet", name, ns) or {}
        st_status = statefulset.get("status") or {}
        log.info("workload applied", order=request.ref.key, device_class=plan.deviceClass, share=plan.sharePercent)
        return ApplyResult(
            endpoint=endpoint_status(order, cls, self.settings),
            authSecretName=inputs.names.auth_secret if requires_token(cls) else None,
            constraints=constraints_status(cls, request.resolution.scope, request.replicaCeiling),
            readyReplicas=int(st_status.get("readyReplicas") or 0),
            desiredReplicas=int((statefulset.get("spec") or {}).get("replicas") or 1),
            settledRegionKept=kept is not None,
            settledRegionKeptMessage=settled_region_kept_message(*kept) if kept is not None else None,
            runtimeCurrent=verdict.status == ConditionStatus.TRUE,
            runtimeReason=str(verdict.reason),
            runtimeMessage=verdict.message,
            moving=surging,
            moveStep=str(shape.step),
            gpusWonBack=shape.gpusWonBack,
        )

    def _retire_moved(self, request: ApplyInput, inputs: WorkloadInputs, shape: SetShape) -> None:
        """The old replicas of a finished move are going: their model volumes go too (the set keeps a
        scaled-down replica's volume for when it comes back; a retired ordinal never does), and the
        devices won back are counted."""
        ns, name = request.ref.namespace, request.ref.name
        templates = [str((t.get("metadata") or {}).get("name")) for t in volume_claim_templates(inputs)]
        for ordinal in shape.retired:
            for template in templates:
                claim = f"{template}-{name}-{ordinal}"
                found = self.applier.get("v1", "PersistentVolumeClaim", claim, ns)
                volume_labels = ((found or {}).get("metadata") or {}).get("labels") or {}
                if found is not None and volume_labels.get(LABEL_ORDER) == name:
                    self.applier.delete("v1", "PersistentVolumeClaim", claim, ns, uid=found["metadata"]["uid"])
        if shape.gpusWonBack > 0:
            GPUS_WON_BACK.inc(shape.gpusWonBack)
        log.info("move finished", order=request.ref.key, retired=list(shape.retired), gpus_won_back=shape.gpusWonBack)

    def _claim_host(self, ref: OrderRef, ingress: dict[str, Any]) -> None:
        """The order's External host is its own: no other order published it first, and it is not
        the platform's. Else HostNameTaken (nothing published), and an Ingress the order made in a
        race it lost goes. One labelled list of Ingresses in every namespace (the digest label)."""
        host = str(ingress["spec"]["rules"][0]["host"])
        selector = f"{LABEL_ENDPOINT_HOST}={host_digest(host)}"
        listing = self.applier.resource("networking.k8s.io/v1", "Ingress").get(label_selector=selector)
        found = listing.to_dict().get("items") or []
        why = host_taken(host, ref.uid, found, self.settings.exposure.reservedHosts)
        if why is None:
            return
        # A held apply of an order deleted and made again meets the new order's Ingress: it is refused
        # as what it is (not this order any more), and deletes nothing.
        self._still_the_order(ref)
        for mine in found:
            meta = mine.get("metadata") or {}
            if meta.get("namespace") == ref.namespace and ownership(mine, ref.name, ref.uid) == Ownership.OURS:
                self.applier.delete("networking.k8s.io/v1", "Ingress", meta["name"], ref.namespace, uid=meta["uid"])
        raise ApplicationError(
            f"{why}: nothing is published for this order. An External host is made from the order's name "
            "and namespace; create the order under another name, or wait until the other order is deleted "
            "and then edit this one (any annotation) to apply it again",
            type=str(Reason.HOST_NAME_TAKEN),
            non_retryable=True,
        )

    def _verify_workload(
        self, request: ApplyInput, inputs: WorkloadInputs, standing: dict[str, Any] | None, held_model: bool
    ) -> None:
        """The recipe is the release's and the held spec only keeps what runs; else nothing is written."""
        desired = build_statefulset(inputs)
        placement_kept = standing is not None and (standing.get("metadata", {}).get("annotations") or {}).get(
            ANNOTATION_PLACEMENT
        ) == (desired["metadata"].get("annotations") or {}).get(ANNOTATION_PLACEMENT)
        if not placement_kept and (problem := plan_policy_problem(request.plan, request.cls)) is not None:
            # A placement the class does not allow is kept only where it already runs (a held plan).
            raise _distrusted(f"the launch plan is not one the class allows: {problem}")
        # What the tables cannot judge (node, devices, share, CPU, memory, volume) only the planner can: the
        # plan must be the one it answered for this order, as this worker sealed it. A plan recorded before
        # seals passes only where it changes nothing that runs (placement, sizing and what runs all kept).
        unsealed = seal_problem(request.plan, request.ref.uid, self.seal_key())
        runs = runs_already(standing, desired)
        unchanged = runs and placement_kept and workload_sizing(standing or {}) == workload_sizing(desired)
        if runs and (unsealed is None or (request.plan.seal is None and unchanged)):
            return  # keeping exactly what runs (a held plan, a held spec, an older release's recipe)
        if held_model:
            raise _distrusted(
                "the workflow holds another model or Secret than the order names "
                f"(spec.model of {request.ref.namespace}/{request.ref.name}), and it is not what runs: "
                "the order is applied only as it is written"
            )
        facts = recipe_facts(
            request.order,
            request.resolution,
            request.endpointType,
            request.cls.spec.modelPolicy.disabledFeatures or [],
        )
        book = load_recipe_book(self.settings.planner.recipesDirectory)
        problem = recipe_problem(
            request.plan, facts, book, fallback_enabled=self.settings.planner.runtimeFallback.enabled
        )
        if problem is not None:
            raise _distrusted(f"the launch plan's recipe is not the release's: {problem}")
        if unsealed is not None:
            raise _distrusted(unsealed)

    def _still_the_order(self, ref: OrderRef) -> None:
        """Right before creating an object: the order still stands, with this uid, not being deleted. The
        cache's word that it does is enough (a deletion it has not seen yet is milliseconds old, as one
        right after a GET would be: what the apply makes is owned by the order's uid, so the garbage
        collector and the finalizer's clean-up take it); anything else is asked of the API server."""
        problem = order_problem(
            self._cached_order(ref, 0) or self._read_any_order(ref), ref.namespace, ref.name, ref.uid
        )
        if problem is not None:
            raise _refused(problem)

    def _apply_owned(
        self,
        ref: OrderRef,
        wanted: DesiredObject,
        known: dict[str, Any] | Absent | None = None,
        confirm: Callable[[], None] | None = None,
    ) -> dict[str, Any]:
        """Server-side apply of one object bound to the order's uid: an object standing under the name is
        patched only when its controller ownerReference is the order (and still the very object read:
        its resourceVersion goes with the apply); a deleted order's object is removed first; anything else
        is refused, never adopted. ``known``: the object as this apply already read it, or ``ABSENT`` when
        that read found none (no second read; a stale one is a conflict, then read again); ``confirm``:
        the apply's check that the order stands (once for the loop of writes). The object as applied is
        returned."""
        for attempt in range(3):
            current: dict[str, Any] | None
            if attempt == 0 and isinstance(known, Absent):
                current = None
            elif attempt == 0 and isinstance(known, dict):
                current = known
            else:
                current = self.applier.get(wanted.api_version, wanted.kind, wanted.name, wanted.namespace)
            verdict = ownership(current, ref.name, ref.uid)
            if verdict == Ownership.FOREIGN:
                assert current is not None
                log.warning("object not the order's: left alone", order=ref.key, kind=wanted.kind, name=wanted.name)
                raise _refused(foreign_message(wanted.kind, wanted.namespace, wanted.name, current))
            if verdict == Ownership.LEFT_BY_DELETED_ORDER:
                assert current is not None
                # Its owner is gone only if the order of that name is still this one: checked again now.
                self._still_the_order(ref)
                log.info("a deleted order's object removed", order=ref.key, kind=wanted.kind, name=wanted.name)
                self.applier.delete(
                    wanted.api_version, wanted.kind, wanted.name, wanted.namespace, uid=current["metadata"]["uid"]
                )
                current = None
            body = wanted.body
            if current is None:
                (confirm or (lambda: self._still_the_order(ref)))()
            else:
                meta = {**body["metadata"], "resourceVersion": current["metadata"]["resourceVersion"]}
                body = {**body, "metadata": meta}
            try:
                applied: dict[str, Any] = self.applier.apply(body).to_dict()
                return applied
            except DynamicConflictError:
                continue  # changed (or made) between the read and the write: read it again
        raise RuntimeError(f"{wanted.kind} {wanted.namespace}/{wanted.name} kept changing during the apply")

    def _prune(self, request: ApplyInput, wanted: set[tuple[str, str]], by_name: bool = False) -> None:
        """Delete what the order owns and no longer wants (an Ingress after External → ClusterLocal).
        ``by_name``: no StatefulSet of the order stood, so anything it owns was made by this release's
        applies, under this release's names: those it does not want are read by name, nothing is listed."""
        ns, name = request.ref.namespace, request.ref.name
        candidates = possible_names(ObjectNames(name)) - wanted
        for api_version, kind in OWNED_KINDS:
            if by_name:
                found = (self.applier.get(api_version, kind, n, ns) for k, n in sorted(candidates) if k == kind)
                standing = [{"apiVersion": api_version, "kind": kind, **o} for o in found if o is not None]
            else:
                standing = self._standing(api_version, kind, ns, name)
            for decoy_kind, decoy_name in decoys(standing, name, request.ref.uid):
                log.warning(
                    "object with the module's labels is not the order's: ignored",
                    order=request.ref.key,
                    kind=decoy_kind,
                    name=decoy_name,
                )
            uids = {(o["kind"], o["metadata"]["name"]): o["metadata"].get("uid") for o in standing}
            for unwanted in unwanted_objects(standing, wanted, name, request.ref.uid):
                log.info(
                    "owned object no longer wanted, deleted", order=request.ref.key, kind=unwanted[1], name=unwanted[2]
                )
                self.applier.delete(unwanted[0], unwanted[1], unwanted[2], ns, uid=uids.get((unwanted[1], unwanted[2])))

    def _standing(self, api_version: str, kind: str, ns: str, name: str) -> list[dict[str, Any]]:
        """The objects of one kind that carry the order's labels (apiVersion and kind filled in)."""
        standing: list[dict[str, Any]]
        if kind == "Secret":
            # Never a list of Secrets (the worker's role has none): the ones an order may own are
            # named after it, so each is read by name.
            names = ObjectNames(name)
            found = (self.applier.get(api_version, kind, n, ns) for n in (names.auth_secret, names.tls_secret))
            standing = [s for s in found if s is not None]
        else:
            selector = ",".join(f"{k}={v}" for k, v in selector_labels(name).items())
            listing = self.applier.resource(api_version, kind).get(namespace=ns, label_selector=selector)
            standing = listing.to_dict().get("items") or []
        for item in standing:
            item.setdefault("apiVersion", api_version)
            item.setdefault("kind", kind)
        return standing

    def _create_once(self, body: dict[str, Any]) -> dict[str, Any] | None:
        """Create-only objects (the auth Secret: never rotated silently, never overwritten; the
        namespace's model cache claim: shared, made by the first order that needs it). The Secret as
        made (its metadata only: never its data), or None when it was there already."""
        if body["kind"] == "PersistentVolumeClaim":
            try:
                self.core.create_namespaced_persistent_volume_claim(
                    body["metadata"]["namespace"], body, field_manager=FIELD_MANAGER
                )
            except ApiException as err:
                if err.status != 409:  # 409: it is there (this order's earlier apply, or another order's)
                    raise
            return None
        if body["kind"] != "Secret":
            raise ValueError(f"create-only is for Secrets and the model cache claim, not {body['kind']}")
        try:
            made = self.core.create_namespaced_secret(body["metadata"]["namespace"], body, field_manager=FIELD_MANAGER)
        except ApiException as err:
            if err.status != 409:
                # The status line only: the body of the request held the token.
                raise RuntimeError(f"creating Secret {body['metadata']['name']} failed: HTTP {err.status}") from None
            return None
        metadata: dict[str, Any] = self.api.sanitize_for_serialization(made.metadata)
        return {"apiVersion": "v1", "kind": "Secret", "metadata": metadata}

    # ----------------------------------------------------------------- probe

    def _probe_target(self, ref: OrderRef) -> str:
        """In-cluster Service URL; a Service annotation may point elsewhere (the local stand-ins)."""
        annotation = self.settings.health.probeTargetAnnotation
        service = self.applier.get("v1", "Service", ref.name, ref.namespace) if annotation else None
        return probe_target(ref.name, ref.namespace, service, annotation)

    def _token(self, ref: OrderRef, secret_name: str | None) -> str | None:
        # The order's own auth Secret and no other: the name comes with the request (workflow
        # state), and a Secret read is never steered by it.
        if not secret_name or secret_name != ObjectNames(ref.name).auth_secret:
            return None
        return token_from_secret(self.applier.get("v1", "Secret", secret_name, ref.namespace))

    async def probe(self, request: ProbeInput) -> ProbeResult:
        """One GET /v1/models; ok when it answers 200 and lists the served model (as the observer probes)."""
        target = await asyncio.to_thread(self._probe_target, request.ref)
        token = await asyncio.to_thread(self._token, request.ref, request.authSecretName)
        async with httpx.AsyncClient(verify=False) as http:
            # A class with a token fails closed: an empty or unreadable token is AuthTokenInvalid.
            return await probe_models(
                http,
                target,
                request.servedName,
                token,
                request.timeoutSeconds,
                token_required=request.authSecretName is not None,
            )

    def _ready_replicas(self, ref: OrderRef, wait: float = 0) -> int:
        """The ready replicas of the order's StatefulSet. With none, it watches the StatefulSet up to
        ``wait`` seconds, so a replica that gets ready is seen then, not at the next look."""
        statefulset = self.applier.get("apps/v1", "StatefulSet", ref.name, ref.namespace) or {}
        ready = _ready_of(statefulset)
        version = (statefulset.get("metadata") or {}).get("resourceVersion")
        if ready >= 1 or wait <= 0 or not version:
            return ready
        try:
            response = self.apps.list_namespaced_stateful_set(
                ref.namespace,
                field_selector=f"metadata.name={ref.name}",
                resource_version=version,
                watch=True,
                timeout_seconds=max(1, int(wait)),
                _preload_content=False,
                _request_timeout=(10, wait + 10),
            )
        except ApiException as err:  # an expired version and the like: the next look reads again
            log.debug("await_serving: watch refused", order=f"{ref.namespace}/{ref.name}", status=err.status)
            return ready
        events = watch_events(response)
        try:
            for event in events:
                if event.get("type") == "DELETED":
                    return 0
                if event.get("type") in ("ADDED", "MODIFIED") and (ready := _ready_of(event.get("object") or {})) >= 1:
                    return ready
        except Exception as err:  # a cut watch is only a shorter wait
            log.debug("await_serving: watch ended", order=f"{ref.namespace}/{ref.name}", error=type(err).__name__)
        finally:
            events.close()  # the connection goes back now, not when the generator is collected
        return ready

    @activity.defn(name=act.AWAIT_SERVING)
    async def await_serving(self, request: ProbeInput) -> ProbeResult:
        """Waits for a ready replica, then for the API to answer; gives up after serveWait. Only runs
        recorded before ``first-load-observed`` call it (newer ones wait for ``replica_ready``)."""
        deadline = time.monotonic() + (request.waitSeconds or self.settings.health.serveWaitSeconds)
        last = ProbeResult(ok=False, workloadReady=False, detail="no replica is ready yet")
        # The first looks come soon (0.5 s, doubling up to serveRetrySeconds): a replica of a small or
        # cached model is ready in seconds, and a fixed 5 s step would add up to 5 s to its Ready;
        # between looks the StatefulSet is watched, so its ready replica is seen when it comes.
        pause = min(FIRST_SERVE_LOOK_SECONDS, self.settings.health.serveRetrySeconds)
        while time.monotonic() < deadline:
            looked = time.monotonic()
            # With no replica ready this watches for one, up to the pause: no sleep needed after it.
            ready = await asyncio.to_thread(self._ready_replicas, request.ref, pause)
            if ready >= 1:
                result = await self.probe(request)
                last = result.model_copy(update={"workloadReady": True})
                if result.ok:
                    return last
            activity.heartbeat(last.detail)
            rest = pause - (time.monotonic() - looked)
            if rest > 0:
                await asyncio.sleep(rest)
            pause = min(pause * 2, self.settings.health.serveRetrySeconds)
        return last

    @activity.defn(name=act.PROBE_SERVING)
    async def probe_serving(self, request: ProbeInput) -> ProbeResult:
        """The API of an order whose replica is ready: probed until it answers, for ``waitSeconds`` at
        most (a few looks: the Service may trail the replica's readiness by a moment). Short by design:
        the wait for the replica itself is the workflow's, on the observer's ``replica_ready``."""
        deadline = time.monotonic() + (request.waitSeconds or request.timeoutSeconds)
        pause = min(FIRST_SERVE_LOOK_SECONDS, self.settings.health.serveRetrySeconds)
        while True:
            result = await self.probe(request)
            if result.ok or time.monotonic() + pause >= deadline:
                return result
            activity.heartbeat(result.detail)
            await asyncio.sleep(pause)
            pause = min(pause * 2, self.settings.health.serveRetrySeconds)

    # ---------------------------------------------------------------- status

    @activity.defn(name=act.PUBLISH_STATUS)
    def publish_status(self, update: StatusUpdate) -> None:
        obj = self._cached_order(
            update.ref, update.observedGeneration or 0, deleting=says_deleting(update)
        ) or self._read_order_object(update.ref)
        if obj is None:
            return
        # What the run asks to write is checked against the order (trusted_status): a forged run
        # cannot tell a user to call another endpoint, read another Secret, or that it is deleted.
        trusted, dropped = trusted_status(update, obj, self.settings)
        if dropped:
            log.warning("status write checked", order=update.ref.key, run=_run_id(), dropped=dropped)
        if trusted is None:
            return
        update = trusted
        # The phase written, on the activity's span (docs/tracing.md: an order's trace ends at Ready).
        span = trace.get_current_span()
        span.set_attribute("ai_inference.order", update.ref.key)
        span.set_attribute("ai_inference.phase", str(update.phase.value))
        status = update.model_dump(mode="json", exclude_none=True, exclude=set(STATUS_UPDATE_NOT_WRITTEN))
        status["model"] = {"endpointType": update.endpointType.value} if update.endpointType else None
        # A merge patch keeps keys it does not name: a field that became empty is sent as null.
        for key in StatusUpdate.model_fields.keys() - STATUS_UPDATE_NOT_WRITTEN:
            status.setdefault(key, None)
        written = self.custom.patch_namespaced_custom_object_status(
            GROUP, VERSION, update.ref.namespace, ORDERS, update.ref.name, {"status": status}
        )
        # Each step the write moves is told as an Event on the order (order_events: derived from the
        # conditions, aggregated and rate-limited like client-go's recorder; best effort).
        before = (obj.get("status") or {}).get("conditions")
        read_rv = obj["metadata"].get("resourceVersion")
        last = self._written.get(update.ref.uid)
        if last is not None and read_rv is not None and read_rv in last[:2]:
            before = last[2]  # what was read is this process's last write, or the order just before it
        written_rv = (
            ((written or {}).get("metadata") or {}).get("resourceVersion") if isinstance(written, dict) else None
        )
        self._written[update.ref.uid] = (read_rv, written_rv, status.get("conditions"))
        self._written.move_to_end(update.ref.uid)
        while len(self._written) > WRITTEN_KEPT:
            self._written.popitem(last=False)
        for step in step_events(before, status.get("conditions")):
            self.events.record(OrderEvent(ref=update.ref, type=step.type, reason=step.reason, message=step.message))

    @activity.defn(name=act.RECORD_EVENT)
    def record_event(self, event: OrderEvent) -> None:
        obj = self._cached_order(event.ref, 0) or self._read_order_object(event.ref)
        if obj is None:
            return
        trusted = trusted_event(event)
        if trusted is None:
            log.warning("event refused: not one of the module's", order=event.ref.key, run=_run_id())
            return
        self.core.create_namespaced_event(event.ref.namespace, order_event_body(trusted))


class Absent:
    """An object this apply read and found not there (``_apply_owned`` does not read it again)."""


ABSENT = Absent()


def _once(check: Callable[[], None]) -> Callable[[], None]:
    """``check`` run the first time the result is called, and never again once it passed."""
    passed = False

    def run() -> None:
        nonlocal passed
        if not passed:
            check()
            passed = True

    return run


def order_event_body(event: OrderEvent, component: str = "ai-inference") -> Any:
    """The Kubernetes Event an ``OrderEvent`` is recorded as, on its order (the worker's and the
    observer's alike; ``component``: who says it)."""
    from kubernetes.client import CoreV1Event, V1EventSource, V1ObjectMeta, V1ObjectReference

    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    return CoreV1Event(
        metadata=V1ObjectMeta(generate_name=f"{event.ref.name}."),
        involved_object=V1ObjectReference(
            api_version=f"{GROUP}/{VERSION}",
            kind="InferenceService",
            name=event.ref.name,
            namespace=event.ref.namespace,
            uid=event.ref.uid,
        ),
        reason=event.reason,
        message=event.message,
        type=event.type,
        source=V1EventSource(component=component),
        first_timestamp=now,
        last_timestamp=now,
        count=1,
    )
