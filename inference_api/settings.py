"""Module settings: the public ``catalog.mode`` and the internal values of phases 2.3 and 2.4.

Loaded with pydantic-settings (typed, validated, one precedence order) from, highest first:
constructor arguments, environment variables ``AI_INFERENCE_<FIELD>`` with ``__`` between
nested keys (``AI_INFERENCE_PLANNER__BASEURL``), then a values file named by
``AI_INFERENCE_VALUES_FILE`` (the chart mounts one), then the embedded defaults.
"""

from __future__ import annotations

import os
from enum import StrEnum
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from pydantic import BaseModel, Field, field_validator, model_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    YamlConfigSettingsSource,
)


class CatalogMode(StrEnum):
    ENABLED = "Enabled"
    NONE = "None"


class CatalogTransport(StrEnum):
    REST = "Rest"
    KUBERNETES = "Kubernetes"


class CatalogSettings(BaseModel):
    mode: CatalogMode = Field(default=CatalogMode.ENABLED, description="Enabled or None (no catalog clients).")


# The audiences of the ServiceAccount tokens the worker sends to other services (TokenRequest
# ``audiences``): each service's TokenReview requires its own, so a token stolen from one cannot be
# replayed against the API server or the other service.
PLANNER_AUDIENCE = "ai-inference-planner"
CATALOG_AUDIENCE = "ai-models"
# Where the chart projects those tokens (a projected volume, one file per audience; the kubelet
# rotates them before they expire).
PROJECTED_TOKEN_DIR = "/var/run/secrets/ai-inference/tokens"


class InsecureTransportError(ValueError):
    """A service URL that would carry a bearer token in clear (plain http) while that is not allowed."""


def require_https(url: str, setting: str, allow_insecure_http: bool, flag: str) -> None:
    """Refuse anything but ``https://`` (``http://`` too when ``allow_insecure_http``: tests only)."""
    scheme = urlsplit(url.strip()).scheme.lower()
    if scheme == "https" or (scheme == "http" and allow_insecure_http):
        return
    if scheme == "http":
        raise InsecureTransportError(
            f"{setting} is {url!r}: plain http is refused, the bearer token would cross the network in clear; "
            f"use an https:// URL (or set {flag}: true, which is unsafe and meant for tests only)"
        )
    raise InsecureTransportError(f"{setting} must be an https:// URL, not {url!r}")


class CatalogLookup(BaseModel):
    baseURL: str = "https://ai-models-controller.d8-ai-models.svc.cluster.local:8080"
    path: str = "/api/internal/v1/models/lookup"
    timeoutSeconds: float = Field(default=10, gt=0)
    notReadyRequeueSeconds: float = Field(default=30, gt=0)
    # How the lookup API is reached, not what an order gets: exclude=True keeps these out of the
    # release fingerprint. The token sent is a projected ServiceAccount token bound to `audience`
    # (read from `tokenFile` on each lookup: the kubelet rotates it), never the worker's own.
    audience: str = Field(default=CATALOG_AUDIENCE, min_length=1, exclude=True)
    tokenFile: str = Field(default=f"{PROJECTED_TOKEN_DIR}/catalog", exclude=True)
    # UNSAFE, tests only: accept an http:// baseURL (the token would travel in clear).
    allowInsecureHttp: bool = Field(default=False, exclude=True)


class AIModelsSettings(BaseModel):
    catalogTransport: CatalogTransport = CatalogTransport.REST
    catalogLookup: CatalogLookup = Field(default_factory=CatalogLookup)


class RuntimeFallback(BaseModel):
    enabled: bool = True


class PlannerSettings(BaseModel):
    # Empty: plan in-process with the same library the planner service wraps. Else an https:// URL.
    baseURL: str | None = None
    timeoutSeconds: float = Field(default=10, gt=0)
    runtimeFallback: RuntimeFallback = Field(default_factory=RuntimeFallback)
    # The recipe tables to plan with: a directory with the three tables (an administrator's own, or a
    # new runtime release ahead of a module release); empty: the tables the module ships. Part of the
    # release fingerprint: a new runtime release here reaches every order without an edit.
    recipesDirectory: str | None = None
    # How long the planner service counts a plan it answered against later plans while the order's
    # claims are not allocated yet (a booking; see docs/planner.md). Service behaviour, not what an
    # order gets: out of the release fingerprint.
    bookingTTLSeconds: float = Field(default=600, gt=0, exclude=True)
    # How the service is reached and who may call it, not what an order gets: exclude=True keeps
    # these out of the release fingerprint.
    # The audience the planner's TokenReview requires, and the worker's token is bound to.
    audience: str = Field(default=PLANNER_AUDIENCE, min_length=1, exclude=True)
    # The worker's projected ServiceAccount token for that audience (re-read when it changes).
    tokenFile: str = Field(default=f"{PROJECTED_TOKEN_DIR}/planner", exclude=True)
    # PEM CA bundle the planner's serving certificate is verified against; empty: the system's roots.
    caFile: str | None = Field(default=None, exclude=True)
    # UNSAFE, tests only: the worker accepts an http:// baseURL and `ai-inference planner` serves
    # without --tls-cert-file (the token would travel in clear).
    allowInsecureHttp: bool = Field(default=False, exclude=True)


class TemporalTLS(BaseModel):
    """TLS to the Temporal frontend: the server's CA, the client certificate (mTLS), the name to verify."""

    enabled: bool = False
    # PEM CA bundle of the server's certificate; empty: the system's roots (Temporal Cloud).
    serverCAFile: str | None = None
    # PEM client certificate and its key (mTLS); both or neither.
    clientCertFile: str | None = None
    clientKeyFile: str | None = None
    # The name the server's certificate is verified against (also SNI); empty: the address's host.
    serverName: str | None = None

    @model_validator(mode="after")
    def _consistent(self) -> TemporalTLS:
        if bool(self.clientCertFile) != bool(self.clientKeyFile):
            raise ValueError("temporal.tls.clientCertFile and temporal.tls.clientKeyFile go together (mTLS)")
        configured = [
            name for name in ("serverCAFile", "clientCertFile", "clientKeyFile", "serverName") if getattr(self, name)
        ]
        if configured and not self.enabled:
            raise ValueError(
                f"temporal.tls.{configured[0]} is set but temporal.tls.enabled is false: "
                "the connection would be plain text"
            )
        return self


class TemporalSettings(BaseModel):
    address: str = "localhost:7233"
    namespace: str = "default"
    taskQueue: str = "ai-inference"
    tls: TemporalTLS = Field(default_factory=TemporalTLS)
    # A file holding a Temporal Cloud API key (sent as a bearer token; needs tls.enabled). Read at
    # connect, never logged.
    apiKeyFile: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _tls_enabled_is_gone(cls, data: Any) -> Any:
        if isinstance(data, dict) and any(str(key).lower() == "tlsenabled" for key in data):
            raise ValueError(
                "temporal.tlsEnabled was replaced by the temporal.tls block "
                "(enabled, serverCAFile, clientCertFile, clientKeyFile, serverName)"
            )
        return data

    @model_validator(mode="after")
    def _api_key_needs_tls(self) -> TemporalSettings:
        if self.apiKeyFile and not self.tls.enabled:
            raise ValueError("temporal.apiKeyFile needs temporal.tls.enabled: the key would cross the network in clear")
        return self


class ExposureSettings(BaseModel):
    # {name} and {namespace} of the order; the result is the host of an External endpoint, unless
    # publicDomainTemplate is set.
    domainTemplate: str = "{name}.{namespace}.ai.example.com"
    # The platform's public domain template (Deckhouse's global.modules.publicDomainTemplate, e.g.
    # "%s.example.com"): when set, an External endpoint's host is this template with %s replaced by
    # "{name}-{namespace}" (activities/builders/exposure.py), and domainTemplate is not used.
    publicDomainTemplate: str | None = None

    @field_validator("publicDomainTemplate")
    @classmethod
    def _one_placeholder(cls, value: str | None) -> str | None:
        if not value:
            return None
        if value.count("%s") != 1 or "%" in value.replace("%s", ""):
            raise ValueError(f"exposure.publicDomainTemplate must contain %s exactly once, not {value!r}")
        return value

    ingressClassName: str | None = None
    # Namespaces let in by each order's NetworkPolicy (besides the order's own and the module's):
    # where the ingress controller runs (External classes only), and where Prometheus scrapes
    # /metrics from (the HPA's queue metric).
    ingressControllerNamespace: str = Field(default="d8-ingress-nginx", min_length=1)
    monitoringNamespace: str = Field(default="d8-monitoring", min_length=1)
    # Hosts no order's External endpoint may take: the platform's own under the same domain (its
    # console, Grafana, Dex, the API, ...). An order whose host is one of them is refused HostNameTaken.
    reservedHosts: list[str] = Field(default_factory=list)

    @field_validator("reservedHosts")
    @classmethod
    def _hosts_lowercase(cls, value: list[str]) -> list[str]:
        return sorted({h.strip().lower().rstrip(".") for h in value if h.strip()})


# A PEM bundle the fetcher trusts is one or more certificates; a pod annotation carries it (256 KiB
# for all of a pod's annotations), so it stays well below.
CA_BUNDLE_MAX_BYTES = 128 * 1024


class HuggingFaceSource(BaseModel):
    """How the ``model-fetcher`` init containers reach the Hugging Face hub: a mirror, a proxy, the CAs
    to trust (an air-gapped or filtered cluster). Module settings only, never an order's or a class's:
    a tenant cannot point the fetcher at a proxy or a CA of theirs. Empty: the pod template is what it
    is without them. Part of the pod template, so of the release fingerprint: a change rolls the orders."""

    # The hub's (or a mirror's) base URL, the fetcher's HF_ENDPOINT: "https://hf-mirror.example.com".
    # The order's token (HF_TOKEN, gated models) is sent to it.
    endpoint: str | None = None
    # The proxy the fetcher's https requests go through (HTTPS_PROXY), "http://proxy.example.com:3128".
    httpsProxy: str | None = None
    # Hosts reached without the proxy (NO_PROXY): names, ".domain" suffixes, IPs or CIDRs.
    noProxy: list[str] = Field(default_factory=list)
    # PEM certificates the fetcher trusts instead of the image's roots (SSL_CERT_FILE and the like): the
    # mirror's CA, a TLS-inspecting proxy's CA, and public roots if huggingface.co is reached too.
    caBundle: str | None = None
    # The worker asks the hub (this endpoint, proxy and CAs, without a token) which commit an order's
    # reference points at when its plan is made, and every replica fetches that commit. False: each
    # replica's fetcher resolves the reference when it downloads (a worker that cannot reach the hub).
    pinRevision: bool = True

    @field_validator("endpoint", "httpsProxy")
    @classmethod
    def _http_url(cls, value: str | None, info: Any) -> str | None:
        if not value or not value.strip():
            return None
        url = value.strip().rstrip("/")
        split = urlsplit(url)
        setting = f"workload.modelSource.huggingFace.{info.field_name}"
        if split.scheme.lower() not in ("http", "https") or not split.hostname:
            raise ValueError(f"{setting} must be an http:// or https:// URL, not {value!r}")
        if split.username or split.password:
            raise ValueError(
                f"{setting} must not carry credentials: it is written into every order's pod template, "
                "which the order's tenant can read"
            )
        if split.query or split.fragment:
            raise ValueError(f"{setting} must be a base URL without a query or fragment, not {value!r}")
        return url

    @field_validator("noProxy")
    @classmethod
    def _hosts(cls, value: list[str]) -> list[str]:
        hosts = [host.strip() for host in value if host.strip()]
        for host in hosts:
            if any(c in host for c in ", \t\n/") and not _is_cidr(host):
                raise ValueError(f"workload.modelSource.huggingFace.noProxy: one host per item, not {host!r}")
        return hosts

    @field_validator("caBundle")
    @classmethod
    def _pem(cls, value: str | None) -> str | None:
        if not value or not value.strip():
            return None
        pem = value.strip() + "\n"
        if "-----BEGIN CERTIFICATE-----" not in pem or "-----END CERTIFICATE-----" not in pem:
            raise ValueError("workload.modelSource.huggingFace.caBundle must hold PEM certificates (BEGIN CERTIFICATE)")
        if "PRIVATE KEY" in pem:
            raise ValueError(
                "workload.modelSource.huggingFace.caBundle holds a private key: give the certificates only"
            )
        if len(pem.encode()) > CA_BUNDLE_MAX_BYTES:
            raise ValueError(f"workload.modelSource.huggingFace.caBundle is over {CA_BUNDLE_MAX_BYTES // 1024} KiB")
        return pem

    @property
    def configured(self) -> bool:
        return bool(self.endpoint or self.httpsProxy or self.noProxy or self.caBundle)


def _is_cidr(host: str) -> bool:
    address, _, bits = host.partition("/")
    return bool(bits.isdigit() and address and all(c in "0123456789abcdefABCDEF.:" for c in address))


class ModelSourceSettings(BaseModel):
    """Where the fetcher gets the order's model from (docs/workload.md, docs/admin-guide.md)."""

    huggingFace: HuggingFaceSource = Field(default_factory=HuggingFaceSource)


class ModelCacheSettings(BaseModel):
    """A model cache shared by the orders of a namespace (docs/workload.md, "The model cache").

    Enabled, every order's namespace gets one ReadWriteMany claim ``claimName`` (made once by the
    module, kept when orders go: it is a cache of what they downloaded), mounted by the orders' model
    fetchers only: a replica whose repository and commit the cache holds copies it from there instead
    of downloading it, after the hub has said with the order's own token that the order may read it.
    """

    enabled: bool = False
    # A StorageClass that provides ReadWriteMany volumes (NFS, CephFS); None: the cluster's default.
    storageClassName: str | None = None
    size: str = Field(default="200Gi", pattern=r"^[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|Pi|k|M|G|T|P)?$")
    claimName: str = Field(default="ai-inference-model-cache", pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


class WorkloadSettings(BaseModel):
    """The order workloads' pods (never order fields): where their images come from and which nodes
    they may land on. Part of the release fingerprint: a change reaches every order's pod template."""

    # A registry (and path) that replaces the recipe image's registry: "mirror.example.com/ai" turns
    # "vllm/vllm-openai:v0.11.0" into "mirror.example.com/ai/vllm/vllm-openai:v0.11.0". Empty: as is.
    imageRegistry: str = ""
    # Names of image pull Secrets the runtime pods reference (they must exist in the order's namespace).
    imagePullSecrets: list[str] = Field(default_factory=list)
    # Scheduling onto GPU nodes: a nodeSelector and tolerations (Kubernetes' shapes) for every runtime pod.
    nodeSelector: dict[str, str] = Field(default_factory=dict)
    tolerations: list[dict[str, Any]] = Field(default_factory=list)
    # The autoscaler's stabilization windows (HPA behavior): how long a rise (a fall) of the queue must
    # last before a replica is added (given up). A replica loads its model for minutes, so both are
    # slow by default; the HPA allows at most an hour.
    scaleUpStabilizationSeconds: int = Field(default=60, ge=0, le=3600)
    scaleDownStabilizationSeconds: int = Field(default=600, ge=0, le=3600)
    # The engine's own traces (vLLM's --otlp-traces-endpoint: OTLP over gRPC, e.g.
    # "http://otel-collector.d8-monitoring:4317"), as its pods reach the collector. Empty: the engine
    # traces nothing. Part of the pod template, so of the release fingerprint: a change rolls the orders.
    engineOtlpTracesEndpoint: str | None = None
    # The fetcher's way to the hub: a mirror endpoint, a proxy, a CA bundle (an air-gapped cluster).
    modelSource: ModelSourceSettings = Field(default_factory=ModelSourceSettings)
    # A namespace's orders share what their fetchers downloaded (off by default: it needs RWX storage).
    modelCache: ModelCacheSettings = Field(default_factory=ModelCacheSettings)

    def image(self, reference: str) -> str:
        """``reference`` pulled from ``imageRegistry``: its own registry host (a first part with a dot or
        a colon, or localhost) is replaced, a Docker Hub name keeps its path."""
        registry = self.imageRegistry.strip().rstrip("/")
        if not registry:
            return reference
        first, _, rest = reference.partition("/")
        path = rest if rest and ("." in first or ":" in first or first == "localhost") else reference
        return f"{registry}/{path}"


class HealthSettings(BaseModel):
    intervalSeconds: float = Field(default=600, gt=0)
    failureThreshold: int = Field(default=3, ge=1)
    probeTimeoutSeconds: float = Field(default=5, gt=0)
    # How long the first probe waits for a replica to load the model, and how often it looks (at most:
    # the first looks come after 0.5 s, 1 s, 2 s, ... up to serveRetrySeconds).
    serveWaitSeconds: float = Field(default=1800, gt=0)
    serveRetrySeconds: float = Field(default=5, gt=0)
    # How often an autoscaled order's scaling watch reads its HPA and replicas (preemption).
    scalingIntervalSeconds: float = Field(default=15, gt=0)
    # When set, the probe reads its target URL from this annotation of the order's Service
    # (the local cluster's stand-in runtimes); otherwise it probes the in-cluster Service.
    probeTargetAnnotation: str | None = None


class RepackSettings(BaseModel):
    """The repack (the administrator's switch): serving orders stranded on a whole device are asked to
    move, made before it breaks, onto a place that takes less of a device (worker/observer/repack.py)."""

    # Off by default: a move restarts the model on the new place (the old replicas serve meanwhile).
    enabled: bool = False
    # How often the leading observer looks for stranded orders.
    intervalSeconds: float = Field(default=300, gt=0)
    # Orders asked to move in one pass, at most.
    maxMovesPerPass: int = Field(default=4, ge=1)


class LeaderElectionSettings(BaseModel):
    """The observer's leader election (``worker/observer/leader.py``): one Lease in the module's
    namespace per shard; the replica holding it observes, the others stand by.

    A standby takes over once it has seen the Lease unchanged for ``leaseDurationSeconds``; a leader
    that could not renew for ``renewDeadlineSeconds`` stops signalling, so before anyone else may
    start (hence renewDeadline < leaseDuration, and the gap is the time the old leader has to stop).
    """

    enabled: bool = False
    # The Lease's name; with several shards, ``-<shard>`` is appended.
    leaseName: str = "ai-inference-observer"
    leaseDurationSeconds: int = Field(default=15, ge=1)
    renewDeadlineSeconds: float = Field(default=10, gt=0)
    retryPeriodSeconds: float = Field(default=2, gt=0)

    @model_validator(mode="after")
    def _ordered(self) -> LeaderElectionSettings:
        if not self.renewDeadlineSeconds < self.leaseDurationSeconds:
            raise ValueError(
                f"observer.leaderElection.renewDeadlineSeconds ({self.renewDeadlineSeconds:g}) must be below "
                f"leaseDurationSeconds ({self.leaseDurationSeconds}): a leader that lost its Lease must stop "
                "before a standby may take over"
            )
        if not self.retryPeriodSeconds * 1.2 < self.renewDeadlineSeconds:
            raise ValueError(
                f"observer.leaderElection.retryPeriodSeconds ({self.retryPeriodSeconds:g}) must be well below "
                f"renewDeadlineSeconds ({self.renewDeadlineSeconds:g}): a leader needs more than one try to renew"
            )
        return self


class ObserverSettings(BaseModel):
    """The observer (``ai-inference watch``): resync period, probe concurrency, its shard, and its
    leader election.

    Not part of what shapes an order: left out of ``model_dump`` (so out of the release
    fingerprint), or every shard, whose ``shard`` differs, would compute another fingerprint.
    """

    # How often the listing of orders is compared with Temporal's running order workflows.
    resyncSeconds: float = Field(default=300, gt=0)
    # Health probes in flight at once.
    probeConcurrency: int = Field(default=64, ge=1)
    # Changes of one order seen within this window are coalesced into one signal.
    debounceSeconds: float = Field(default=1.0, ge=0)
    # A replica's node not Ready for less than this (counted from its Ready condition's
    # lastTransitionTime) is NodeNotReady, the placement kept; from then on NodeLost, the order moves.
    # 300 s: the toleration Kubernetes gives every pod for the not-ready/unreachable NoExecute taints
    # (DefaultTolerationSeconds), so the order moves when the cluster's own eviction would. 0: at once.
    nodeNotReadyGraceSeconds: float = Field(default=300, ge=0)
    # While a replica's model-fetcher downloads, its log's last lines are read this often (pods/log) and
    # the order says how much of the model arrived, in steps of 10 %. 0: never read (the order says it
    # downloads, without numbers).
    downloadProgressSeconds: float = Field(default=15, ge=0)
    # New orders (no status yet) whose workflows are started and not yet settled (Ready, failed or
    # waiting), at most, at once; the others wait in the observer, first come first started. Keeps a
    # burst's orders in progress within the workers' caches (worker.cachedWorkflows, 1000 each): a
    # burst of thousands started at once replays every workflow at every task. 0: no bound.
    startWindow: int = Field(default=500, ge=0)
    # The longest a started new order holds its place without a settled status.
    startWindowSeconds: float = Field(default=120, gt=0)
    # The orders' own Secrets ({order}-auth, {order}-tls) are read by name every 30 s, at most this
    # many a second: past 600 Secrets the period grows with them (1,200: 60 s), so the observer's
    # steady load on the API server stays bounded however many orders serve. A probe answered 401 or
    # 403 reads its order's token again once it is 30 s old. 0: no bound.
    secretReadsPerSecond: float = Field(default=20, ge=0)
    # An order's own pods bound to a lost node (deleted, or not Ready past the grace above) are
    # force-deleted (gracePeriodSeconds 0), as `kubectl delete pod --force` or the out-of-service taint
    # would: no kubelet confirms their deletion, so without it they stay Terminating and the StatefulSet
    # never makes the replica again. The trade: a node that is only cut off may still run the old
    # engine for a while (two copies serve briefly; an inference server holds no data to corrupt).
    # False: the replica waits until the node comes back or an administrator deletes the Node.
    forceDeletePodsOnLostNodes: bool = True
    # Orders are split by uid: this observer handles int(sha256(uid)) % shards == shard.
    shards: int = Field(default=1, ge=1)
    shard: int = Field(default=0, ge=0)
    # Several replicas of one shard: one leads (a Lease), the others stand by.
    leaderElection: LeaderElectionSettings = Field(default_factory=LeaderElectionSettings)
    # Moves of stranded orders (the administrator's switch; off by default).
    repack: RepackSettings = Field(default_factory=RepackSettings)

    @model_validator(mode="after")
    def _shard_in_range(self) -> ObserverSettings:
        if self.shard >= self.shards:
            raise ValueError(f"observer.shard {self.shard} is not below observer.shards {self.shards}")
        return self


class WorkerSettings(BaseModel):
    """The Temporal worker's own sizing; like the observer's, not part of what shapes an order.

    Workflow tasks run Python under one interpreter lock: a worker that takes far more at once than
    it can finish within the workflow task timeout (10 s) times them out, and they come back, so a
    burst of new orders livelocked a worker with the SDK's default of 100 on a busy 2-core machine
    (benchmarks/scale.py). Fewer in flight keeps each under the timeout; the rest wait at the server.
    """

    workflowTaskSlots: int = Field(default=10, ge=1)
    # Activities block on the API server in a thread pool of this size; slots match it.
    activitySlots: int = Field(default=16, ge=1)
    # Order workflows kept in memory between their tasks. One not kept is replayed from its whole
    # history on its next task: harmless for serving orders (a task a day), costly when more orders
    # than this make progress at once (a burst of new orders, a release reaching every order).
    cachedWorkflows: int = Field(default=1000, ge=0)
    # How often the worker checks that the namespace still holds the module's search attributes and
    # registers the missing ones: a production Temporal's namespace made again comes back without
    # them, and every order's workflow task fails until they are back.
    searchAttributeCheckSeconds: float = Field(default=60, gt=0)


class TracingSettings(BaseModel):
    """OpenTelemetry traces of the module's own processes (``worker/tracing.py``, docs/tracing.md).

    How the module reports on itself, never what an order gets: out of the release fingerprint."""

    # OTLP over HTTP: the collector's base URL (``http://otel-collector.d8-monitoring:4318``); spans
    # go to ``<otlpEndpoint>/v1/traces``. Empty: tracing is off (no SDK set up, no exporter, nothing sent).
    otlpEndpoint: str | None = None
    # The service name the spans carry; empty: ``ai-inference-<process>`` (worker, watch, planner).
    serviceName: str | None = None
    # The fraction of new traces kept (parent-based: a kept trace is kept whole across processes).
    sampleRatio: float = Field(default=1.0, ge=0, le=1)

    @field_validator("otlpEndpoint")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        if not value or not value.strip():
            return None
        scheme = urlsplit(value.strip()).scheme.lower()
        if scheme not in ("http", "https"):
            raise ValueError(f"tracing.otlpEndpoint must be an http:// or https:// URL (OTLP/HTTP), not {value!r}")
        return value.strip().rstrip("/")


LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


class ModuleSettings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="AI_INFERENCE_", env_nested_delimiter="__", case_sensitive=False, extra="ignore"
    )

    catalog: CatalogSettings = Field(default_factory=CatalogSettings)
    aiModels: AIModelsSettings = Field(default_factory=AIModelsSettings)
    planner: PlannerSettings = Field(default_factory=PlannerSettings)
    temporal: TemporalSettings = Field(default_factory=TemporalSettings)
    exposure: ExposureSettings = Field(default_factory=ExposureSettings)
    workload: WorkloadSettings = Field(default_factory=WorkloadSettings)
    health: HealthSettings = Field(default_factory=HealthSettings)
    # exclude: per-process (a shard number), never part of the release fingerprint.
    observer: ObserverSettings = Field(default_factory=ObserverSettings, exclude=True)
    worker: WorkerSettings = Field(default_factory=WorkerSettings, exclude=True)
    tracing: TracingSettings = Field(default_factory=TracingSettings, exclude=True)
    # The level of every process's log lines (DEBUG, INFO, WARNING, ERROR); AI_INFERENCE_LOGLEVEL.
    logLevel: str = Field(default="INFO", exclude=True)
    moduleNamespace: str = "d8-ai-inference"

    @field_validator("logLevel")
    @classmethod
    def _known_level(cls, value: str) -> str:
        level = value.strip().upper()
        if level == "WARN":
            level = "WARNING"
        if level not in LOG_LEVELS:
            raise ValueError(f"logLevel must be one of {', '.join(LOG_LEVELS)}, not {value!r}")
        return level

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings]
        values_file = os.environ.get("AI_INFERENCE_VALUES_FILE")
        if values_file and Path(values_file).is_file():
            sources.append(YamlConfigSettingsSource(settings_cls, yaml_file=values_file))
        return tuple(sources)


def load_settings(**overrides: Any) -> ModuleSettings:
    return ModuleSettings(**overrides)
