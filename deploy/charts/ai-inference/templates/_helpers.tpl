{{/* The module's namespace. */}}
{{- define "ai-inference.namespace" -}}
{{- required "namespace is required" .Values.namespace -}}
{{- end -}}

{{/* Labels every object of the chart carries. */}}
{{- define "ai-inference.labels" -}}
module: ai-inference
heritage: {{ .Release.Service }}
app.kubernetes.io/part-of: ai-inference
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{/* Labels of one component; call with (list $ "worker"). */}}
{{- define "ai-inference.componentLabels" -}}
{{- $root := index . 0 -}}
{{- $component := index . 1 -}}
{{ include "ai-inference.labels" $root }}
app: ai-inference-{{ $component }}
app.kubernetes.io/name: ai-inference-{{ $component }}
app.kubernetes.io/component: {{ $component }}
{{- end -}}

{{/* Pod selector of one component; call with (list $ "worker"). */}}
{{- define "ai-inference.selectorLabels" -}}
{{- $component := index . 1 -}}
app: ai-inference-{{ $component }}
{{- end -}}

{{/*
Plain Helm or Deckhouse: one set of templates reads the module's values at .Values.aiInference and the
platform's at .Values.global in both. What differs is resolved here and nowhere else:
- "ai-inference.deckhouse": non-empty when Deckhouse renders the module (its global values carry
  modulesImages);
- "ai-inference.image": the digest Deckhouse publishes for the module's image
  (global.modulesImages.digests.aiInference.aiInference at global.modulesImages.registry.base), else
  image.repository:image.tag (the chart's appVersion when the tag is empty), @image.digest when set;
- "ai-inference.imageRef": an image value (repository, tag, digest) as repository:tag@digest, pinned
  with the tag kept readable, when its digest is set or "ai-inference.shippedDigests" knows the
  repository:tag; else repository:tag;
- "ai-inference.createNamespace": Deckhouse modules own their namespace; with plain Helm,
  createNamespace (helm install --create-namespace otherwise);
- "ai-inference.publicDomainTemplate": global.modules.publicDomainTemplate, Deckhouse's or set by hand;
- "ai-inference.crdUpgrade": the pre-upgrade hook that applies the CRDs, with plain Helm only
  (crdUpgrade.enabled): Deckhouse applies the module's crds/ itself.
*/}}
{{- define "ai-inference.global" -}}
{{- toYaml (.Values.global | default dict) -}}
{{- end -}}

{{- define "ai-inference.deckhouse" -}}
{{- $global := include "ai-inference.global" . | fromYaml -}}
{{- if $global.modulesImages -}}true{{- end -}}
{{- end -}}

{{- define "ai-inference.image" -}}
{{- $global := include "ai-inference.global" . | fromYaml -}}
{{- $digest := dig "modulesImages" "digests" "aiInference" "aiInference" "" $global -}}
{{- if $digest -}}
{{- printf "%s@%s" (required "global.modulesImages.registry.base is required" (dig "modulesImages" "registry" "base" "" $global)) $digest -}}
{{- else -}}
{{- include "ai-inference.imageRef" (merge (dict "tag" (default .Chart.AppVersion .Values.image.tag)) .Values.image) -}}
{{- end -}}
{{- end -}}

{{- define "ai-inference.imageRef" -}}
{{- $ref := printf "%s:%s" .repository (toString .tag) -}}
{{- $digest := .digest | default (get (include "ai-inference.shippedDigests" . | fromYaml) $ref) -}}
{{- if $digest -}}
{{- $ref = printf "%s@%s" $ref $digest -}}
{{- end -}}
{{- $ref -}}
{{- end -}}

{{/*
The digests of the third-party images this release ships with, by repository:tag (each the tag's
multi-arch index as published; `crane digest <repository>:<tag>` prints it). An image value at one
of these pins itself without an image.digest; another tag (or repository: a mirror) is not in the
list, so it runs by its tag unless its own digest is set: a changed tag never pulls the old build.
*/}}
{{- define "ai-inference.shippedDigests" -}}
temporalio/temporal:1.9.1: sha256:ad4c82c97bd12b417d1ea942610dbcd511afb250c4d5ed26c694009533df447e
nginxinc/nginx-unprivileged:1.28-alpine: sha256:7377697a821c131a924a7105fafbe7414db4e9fcc77a6f08f776f33f141ec3f8
{{- end -}}

{{- define "ai-inference.imagePullSecrets" -}}
{{- $global := include "ai-inference.global" . | fromYaml -}}
{{- $secrets := .Values.imagePullSecrets | default list -}}
{{- if dig "modulesImages" "registry" "dockercfg" "" $global -}}
{{- $secrets = append $secrets (dict "name" "ai-inference-registry") -}}
{{- end -}}
{{- with $secrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{- define "ai-inference.createNamespace" -}}
{{- if or .Values.createNamespace (include "ai-inference.deckhouse" .) -}}true{{- end -}}
{{- end -}}

{{- define "ai-inference.crdUpgrade" -}}
{{- if and .Values.crdUpgrade.enabled (not (include "ai-inference.deckhouse" .)) -}}true{{- end -}}
{{- end -}}

{{/* Annotations of a pre-upgrade hook object; call with its weight ("-20"): lower runs first. */}}
{{- define "ai-inference.crdUpgradeHook" -}}
helm.sh/hook: pre-upgrade
helm.sh/hook-weight: {{ . | quote }}
helm.sh/hook-delete-policy: before-hook-creation,hook-succeeded
{{- end -}}

{{/* Annotations of a pre-delete hook object (templates/disable/); call with its weight ("-20"). */}}
{{- define "ai-inference.disableHook" -}}
helm.sh/hook: pre-delete
helm.sh/hook-weight: {{ . | quote }}
helm.sh/hook-delete-policy: before-hook-creation,hook-succeeded
{{- end -}}

{{- define "ai-inference.publicDomainTemplate" -}}
{{- $global := include "ai-inference.global" . | fromYaml -}}
{{- $template := dig "modules" "publicDomainTemplate" "" $global -}}
{{- if and $template (not (contains "%s" $template)) -}}
{{- fail (printf "global.modules.publicDomainTemplate must contain %%s, not %q" $template) -}}
{{- end -}}
{{- $template -}}
{{- end -}}

{{/* The Temporal frontend of the worker and the watcher: the embedded server's Service, or temporal.address. */}}
{{- define "ai-inference.temporalAddress" -}}
{{- $t := .Values.aiInference.temporal -}}
{{- if $t.embedded.enabled -}}
{{- if $t.address -}}
{{- fail "aiInference.temporal.address is set while aiInference.temporal.embedded.enabled is true: set embedded.enabled: false to use an existing Temporal" -}}
{{- end -}}
{{- printf "ai-inference-temporal.%s.svc:7233" (include "ai-inference.namespace" .) -}}
{{- else -}}
{{- required "aiInference.temporal.address is required when aiInference.temporal.embedded.enabled is false" $t.address -}}
{{- end -}}
{{- end -}}

{{- define "ai-inference.serviceAccountName" -}}
{{- printf "ai-inference-%s" . -}}
{{- end -}}

{{- define "ai-inference.catalogEnabled" -}}
{{- $mode := .Values.aiInference.catalog.mode | toString -}}
{{- if not (has $mode (list "Enabled" "None")) -}}
{{- fail (printf "aiInference.catalog.mode must be Enabled or None, not %q" $mode) -}}
{{- end -}}
{{- if eq $mode "Enabled" -}}true{{- end -}}
{{- end -}}

{{/* The planner URL the controller calls: the value, or the Service this chart ships (HTTPS). */}}
{{- define "ai-inference.plannerBaseURL" -}}
{{- if .Values.aiInference.planner.baseURL -}}
{{- .Values.aiInference.planner.baseURL -}}
{{- else -}}
{{- printf "https://ai-inference-planner.%s.svc:%v" (include "ai-inference.namespace" .) .Values.planner.port -}}
{{- end -}}
{{- end -}}

{{/* The planner's serving certificate: CertManager, Helm (generated here) or Secret (yours). */}}
{{- define "ai-inference.plannerTLSMode" -}}
{{- $mode := .Values.planner.tls.mode | toString -}}
{{- if not (has $mode (list "Auto" "CertManager" "Helm" "Secret")) -}}
{{- fail (printf "planner.tls.mode must be Auto, CertManager, Helm or Secret, not %q" $mode) -}}
{{- end -}}
{{- if eq $mode "Auto" -}}
{{- if .Capabilities.APIVersions.Has "cert-manager.io/v1/Certificate" -}}CertManager{{- else -}}Helm{{- end -}}
{{- else -}}
{{- $mode -}}
{{- end -}}
{{- end -}}

{{/* DNS names of the planner Service, in its serving certificate. */}}
{{- define "ai-inference.plannerDNSNames" -}}
{{- $ns := include "ai-inference.namespace" . -}}
{{- list "ai-inference-planner" (printf "ai-inference-planner.%s" $ns) (printf "ai-inference-planner.%s.svc" $ns) (printf "ai-inference-planner.%s.svc.cluster.local" $ns) | toJson -}}
{{- end -}}

{{/* Where the processes find their credentials (the mounts below put them there). */}}
{{- define "ai-inference.tokenDir" -}}/var/run/secrets/ai-inference/tokens{{- end -}}
{{- define "ai-inference.plannerTLSDir" -}}/etc/ai-inference/planner-tls{{- end -}}
{{- define "ai-inference.plannerCADir" -}}/etc/ai-inference/planner-ca{{- end -}}
{{- define "ai-inference.temporalTLSDir" -}}/etc/ai-inference/temporal-tls{{- end -}}
{{- define "ai-inference.temporalAPIKeyDir" -}}/etc/ai-inference/temporal-api-key{{- end -}}

{{/*
Module settings as environment variables: AI_INFERENCE_<FIELD> with "__" between nested keys
(inference_api/settings.py). The same list for every process of the module.
*/}}
{{- define "ai-inference.settingsEnv" -}}
{{- $v := .Values.aiInference -}}
- name: AI_INFERENCE_MODULENAMESPACE
  value: {{ include "ai-inference.namespace" . | quote }}
- name: AI_INFERENCE_CATALOG__MODE
  value: {{ $v.catalog.mode | toString | quote }}
- name: AI_INFERENCE_AIMODELS__CATALOGTRANSPORT
  value: {{ $v.aiModels.catalogTransport | quote }}
- name: AI_INFERENCE_AIMODELS__CATALOGLOOKUP__BASEURL
  value: {{ $v.aiModels.catalogLookup.baseURL | quote }}
- name: AI_INFERENCE_AIMODELS__CATALOGLOOKUP__PATH
  value: {{ $v.aiModels.catalogLookup.path | quote }}
- name: AI_INFERENCE_AIMODELS__CATALOGLOOKUP__TIMEOUTSECONDS
  value: {{ $v.aiModels.catalogLookup.timeoutSeconds | toString | quote }}
- name: AI_INFERENCE_AIMODELS__CATALOGLOOKUP__NOTREADYREQUEUESECONDS
  value: {{ $v.aiModels.catalogLookup.notReadyRequeueSeconds | toString | quote }}
- name: AI_INFERENCE_AIMODELS__CATALOGLOOKUP__AUDIENCE
  value: {{ $v.aiModels.catalogLookup.audience | quote }}
- name: AI_INFERENCE_AIMODELS__CATALOGLOOKUP__TOKENFILE
  value: {{ printf "%s/catalog" (include "ai-inference.tokenDir" .) | quote }}
- name: AI_INFERENCE_AIMODELS__CATALOGLOOKUP__ALLOWINSECUREHTTP
  value: {{ $v.aiModels.catalogLookup.allowInsecureHttp | toString | quote }}
- name: AI_INFERENCE_PLANNER__BASEURL
  value: {{ include "ai-inference.plannerBaseURL" . | quote }}
- name: AI_INFERENCE_PLANNER__TIMEOUTSECONDS
  value: {{ $v.planner.timeoutSeconds | toString | quote }}
- name: AI_INFERENCE_PLANNER__RUNTIMEFALLBACK__ENABLED
  value: {{ $v.planner.runtimeFallback.enabled | toString | quote }}
- name: AI_INFERENCE_PLANNER__AUDIENCE
  value: {{ $v.planner.audience | quote }}
- name: AI_INFERENCE_PLANNER__TOKENFILE
  value: {{ printf "%s/planner" (include "ai-inference.tokenDir" .) | quote }}
{{- if not $v.planner.baseURL }}
{{- /* The chart's planner: its certificate is verified against the CA of its Secret. */}}
- name: AI_INFERENCE_PLANNER__CAFILE
  value: {{ printf "%s/ca.crt" (include "ai-inference.plannerCADir" .) | quote }}
{{- end }}
- name: AI_INFERENCE_PLANNER__ALLOWINSECUREHTTP
  value: {{ $v.planner.allowInsecureHttp | toString | quote }}
- name: AI_INFERENCE_TEMPORAL__ADDRESS
  value: {{ include "ai-inference.temporalAddress" . | quote }}
- name: AI_INFERENCE_TEMPORAL__NAMESPACE
  value: {{ $v.temporal.namespace | quote }}
- name: AI_INFERENCE_TEMPORAL__TASKQUEUE
  value: {{ $v.temporal.taskQueue | quote }}
{{- if $v.temporal.embedded.enabled }}
{{- /* The embedded frontend: mutual TLS, the caller's own client certificate (temporalVolumes). */}}
{{- if or $v.temporal.tls.enabled $v.temporal.apiKey.secretName }}
{{- fail "aiInference.temporal.tls and aiInference.temporal.apiKey are for an existing Temporal (embedded.enabled: false); the embedded server's mutual TLS is the chart's own (aiInference.temporal.embedded.tls)" }}
{{- end }}
- name: AI_INFERENCE_TEMPORAL__TLS__ENABLED
  value: "true"
- name: AI_INFERENCE_TEMPORAL__TLS__SERVERCAFILE
  value: {{ printf "%s/ca.crt" (include "ai-inference.temporalTLSDir" .) | quote }}
- name: AI_INFERENCE_TEMPORAL__TLS__CLIENTCERTFILE
  value: {{ printf "%s/tls.crt" (include "ai-inference.temporalTLSDir" .) | quote }}
- name: AI_INFERENCE_TEMPORAL__TLS__CLIENTKEYFILE
  value: {{ printf "%s/tls.key" (include "ai-inference.temporalTLSDir" .) | quote }}
- name: AI_INFERENCE_TEMPORAL__TLS__SERVERNAME
  value: {{ include "ai-inference.temporalServerName" . | quote }}
{{- else }}
{{- with $v.temporal.tls }}
- name: AI_INFERENCE_TEMPORAL__TLS__ENABLED
  value: {{ .enabled | toString | quote }}
{{- if and .enabled .secretName }}
{{- if .caKey }}
- name: AI_INFERENCE_TEMPORAL__TLS__SERVERCAFILE
  value: {{ printf "%s/ca.crt" (include "ai-inference.temporalTLSDir" $) | quote }}
{{- end }}
{{- if and .certKey .keyKey }}
- name: AI_INFERENCE_TEMPORAL__TLS__CLIENTCERTFILE
  value: {{ printf "%s/tls.crt" (include "ai-inference.temporalTLSDir" $) | quote }}
- name: AI_INFERENCE_TEMPORAL__TLS__CLIENTKEYFILE
  value: {{ printf "%s/tls.key" (include "ai-inference.temporalTLSDir" $) | quote }}
{{- end }}
{{- end }}
{{- if and .enabled .serverName }}
- name: AI_INFERENCE_TEMPORAL__TLS__SERVERNAME
  value: {{ .serverName | quote }}
{{- end }}
{{- end }}
{{- if $v.temporal.apiKey.secretName }}
{{- if not $v.temporal.tls.enabled }}
{{- fail "aiInference.temporal.apiKey needs aiInference.temporal.tls.enabled: the key would cross the network in clear" }}
{{- end }}
- name: AI_INFERENCE_TEMPORAL__APIKEYFILE
  value: {{ printf "%s/api-key" (include "ai-inference.temporalAPIKeyDir" .) | quote }}
{{- end }}
{{- end }}
- name: AI_INFERENCE_EXPOSURE__DOMAINTEMPLATE
  value: {{ $v.exposure.domainTemplate | quote }}
{{- with include "ai-inference.publicDomainTemplate" . }}
- name: AI_INFERENCE_EXPOSURE__PUBLICDOMAINTEMPLATE
  value: {{ . | quote }}
{{- end }}
{{- if $v.exposure.ingressClassName }}
- name: AI_INFERENCE_EXPOSURE__INGRESSCLASSNAME
  value: {{ $v.exposure.ingressClassName | quote }}
{{- end }}
{{- /* Unset: the worker's defaults, d8-ingress-nginx and d8-monitoring. */}}
{{- if $v.exposure.ingressControllerNamespace }}
- name: AI_INFERENCE_EXPOSURE__INGRESSCONTROLLERNAMESPACE
  value: {{ $v.exposure.ingressControllerNamespace | quote }}
{{- end }}
{{- if $v.exposure.monitoringNamespace }}
- name: AI_INFERENCE_EXPOSURE__MONITORINGNAMESPACE
  value: {{ $v.exposure.monitoringNamespace | quote }}
{{- end }}
{{- if $v.exposure.reservedHosts }}
- name: AI_INFERENCE_EXPOSURE__RESERVEDHOSTS
  value: {{ $v.exposure.reservedHosts | toJson | quote }}
{{- end }}
{{- with $v.workload }}
{{- if .imageRegistry }}
- name: AI_INFERENCE_WORKLOAD__IMAGEREGISTRY
  value: {{ .imageRegistry | quote }}
{{- end }}
{{- if .imagePullSecrets }}
- name: AI_INFERENCE_WORKLOAD__IMAGEPULLSECRETS
  value: {{ .imagePullSecrets | toJson | quote }}
{{- end }}
{{- if .nodeSelector }}
- name: AI_INFERENCE_WORKLOAD__NODESELECTOR
  value: {{ .nodeSelector | toJson | quote }}
{{- end }}
{{- if .tolerations }}
- name: AI_INFERENCE_WORKLOAD__TOLERATIONS
  value: {{ .tolerations | toJson | quote }}
{{- end }}
{{- if hasKey . "scaleUpStabilizationSeconds" }}
- name: AI_INFERENCE_WORKLOAD__SCALEUPSTABILIZATIONSECONDS
  value: {{ .scaleUpStabilizationSeconds | quote }}
{{- end }}
{{- if hasKey . "scaleDownStabilizationSeconds" }}
- name: AI_INFERENCE_WORKLOAD__SCALEDOWNSTABILIZATIONSECONDS
  value: {{ .scaleDownStabilizationSeconds | quote }}
{{- end }}
{{- if .engineOtlpTracesEndpoint }}
- name: AI_INFERENCE_WORKLOAD__ENGINEOTLPTRACESENDPOINT
  value: {{ .engineOtlpTracesEndpoint | quote }}
{{- end }}
{{- with .modelCache }}
{{- if .enabled }}
- name: AI_INFERENCE_WORKLOAD__MODELCACHE
  value: {{ . | toJson | quote }}
{{- end }}
{{- end }}
{{- $hf := (.modelSource | default dict).huggingFace | default dict }}
{{- if or $hf.endpoint $hf.httpsProxy $hf.noProxy $hf.caBundle (eq (toString $hf.pinRevision) "false") }}
{{- /* One JSON value: the PEM's newlines survive as \n. */}}
- name: AI_INFERENCE_WORKLOAD__MODELSOURCE__HUGGINGFACE
  value: {{ $hf | toJson | quote }}
{{- end }}
{{- end }}
{{- with $v.tracing }}
{{- if .otlpEndpoint }}
- name: AI_INFERENCE_TRACING__OTLPENDPOINT
  value: {{ .otlpEndpoint | quote }}
- name: AI_INFERENCE_TRACING__SAMPLERATIO
  value: {{ .sampleRatio | default 1 | quote }}
{{- end }}
{{- end }}
{{- if $v.logLevel }}
- name: AI_INFERENCE_LOGLEVEL
  value: {{ $v.logLevel | quote }}
{{- end }}
{{- end -}}

{{/*
Temporal credentials: volumes and mounts (worker, watcher). The embedded server: the caller's own
client certificate (its Secret from templates/temporal/tls.yaml; the caller is the including
template's component). An existing Temporal: the TLS Secret's keys are mapped to fixed file names
(ca.crt, tls.crt, tls.key); an empty key name leaves that file out (a publicly trusted server needs no
ca.crt). The API key Secret's key becomes the file api-key.
*/}}
{{- define "ai-inference.temporalVolumes" -}}
{{- $t := .Values.aiInference.temporal -}}
{{- if $t.embedded.enabled }}
- name: temporal-tls
  secret:
    secretName: {{ include "ai-inference.temporalClientSecret" (include "ai-inference.temporalCaller" .) }}
    defaultMode: 0440
    items:
      - {key: ca.crt, path: ca.crt}
      - {key: tls.crt, path: tls.crt}
      - {key: tls.key, path: tls.key}
{{- else if and $t.tls.enabled $t.tls.secretName }}
- name: temporal-tls
  secret:
    secretName: {{ $t.tls.secretName }}
    defaultMode: 0440
    items:
      {{- if $t.tls.caKey }}
      - {key: {{ $t.tls.caKey | quote }}, path: ca.crt}
      {{- end }}
      {{- if and $t.tls.certKey $t.tls.keyKey }}
      - {key: {{ $t.tls.certKey | quote }}, path: tls.crt}
      - {key: {{ $t.tls.keyKey | quote }}, path: tls.key}
      {{- end }}
{{- end }}
{{- if $t.apiKey.secretName }}
- name: temporal-api-key
  secret:
    secretName: {{ $t.apiKey.secretName }}
    defaultMode: 0440
    items:
      - {key: {{ required "aiInference.temporal.apiKey.key is required" $t.apiKey.key | quote }}, path: api-key}
{{- end }}
{{- end -}}

{{- define "ai-inference.temporalMounts" -}}
{{- $t := .Values.aiInference.temporal -}}
{{- if or $t.embedded.enabled (and $t.tls.enabled $t.tls.secretName) }}
- name: temporal-tls
  mountPath: {{ include "ai-inference.temporalTLSDir" . }}
  readOnly: true
{{- end }}
{{- if $t.apiKey.secretName }}
- name: temporal-api-key
  mountPath: {{ include "ai-inference.temporalAPIKeyDir" . }}
  readOnly: true
{{- end }}
{{- end -}}

{{/*
The worker's credentials for the services it calls: projected ServiceAccount tokens bound to each
service's audience (the kubelet renews them at 80 % of their life; the worker reads them again when
they change) and the CA of the chart's planner certificate (ca.crt only: no key reaches the worker).
*/}}
{{- define "ai-inference.workerCredentialVolumes" -}}
- name: service-tokens
  projected:
    sources:
      - serviceAccountToken:
          audience: {{ required "aiInference.planner.audience is required" .Values.aiInference.planner.audience | quote }}
          expirationSeconds: {{ .Values.worker.tokenExpirationSeconds }}
          path: planner
      {{- if include "ai-inference.catalogEnabled" . }}
      - serviceAccountToken:
          audience: {{ required "aiInference.aiModels.catalogLookup.audience is required" .Values.aiInference.aiModels.catalogLookup.audience | quote }}
          expirationSeconds: {{ .Values.worker.tokenExpirationSeconds }}
          path: catalog
      {{- end }}
{{- if not .Values.aiInference.planner.baseURL }}
- name: planner-ca
  secret:
    secretName: {{ .Values.planner.tls.secretName }}
    defaultMode: 0440
    items:
      - {key: ca.crt, path: ca.crt}
{{- end }}
{{- end -}}

{{- define "ai-inference.workerCredentialMounts" -}}
- name: service-tokens
  mountPath: {{ include "ai-inference.tokenDir" . }}
  readOnly: true
{{- if not .Values.aiInference.planner.baseURL }}
- name: planner-ca
  mountPath: {{ include "ai-inference.plannerCADir" . }}
  readOnly: true
{{- end }}
{{- end -}}

{{/* Pod-level settings shared by the module's pods; call with (list $ "worker"). */}}
{{- define "ai-inference.podCommon" -}}
{{- $root := index . 0 -}}
{{- $component := index . 1 -}}
{{- $v := $root.Values -}}
securityContext:
  {{- toYaml $v.podSecurityContext | nindent 2 }}
{{- include "ai-inference.imagePullSecrets" $root }}
{{- with $v.priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
{{- with $v.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $v.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- if $v.affinity }}
affinity:
  {{- toYaml $v.affinity | nindent 2 }}
{{- else }}
{{- /* Replicas of one component (two workers, two observers) on different nodes where the cluster has
     them: a lost node takes one replica, not both; preferred, so a one-node cluster still runs them. */}}
affinity:
  podAntiAffinity:
    preferredDuringSchedulingIgnoredDuringExecution:
      - weight: 100
        podAffinityTerm:
          topologyKey: kubernetes.io/hostname
          labelSelector:
            matchLabels:
              {{- include "ai-inference.selectorLabels" (list $root $component) | nindent 14 }}
{{- end }}
{{- with $v.topologySpreadConstraints }}
topologySpreadConstraints:
  {{- range . }}
  {{- $constraint := deepCopy . }}
  {{- if not $constraint.labelSelector }}
  {{- $_ := set $constraint "labelSelector" (dict "matchLabels" (include "ai-inference.selectorLabels" (list $root $component) | fromYaml)) }}
  {{- end }}
  - {{- toYaml $constraint | nindent 4 }}
  {{- end }}
{{- end }}
{{- end -}}

{{/* Metadata of a component's pod template; call with (list $ "worker"). */}}
{{- define "ai-inference.podMetadata" -}}
{{- $root := index . 0 -}}
labels:
  {{- include "ai-inference.componentLabels" . | nindent 2 }}
{{- with $root.Values.podAnnotations }}
annotations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* A PodDisruptionBudget of a component; call with (list $ "worker" .Values.worker.podDisruptionBudget). */}}
{{- define "ai-inference.podDisruptionBudget" -}}
{{- $root := index . 0 -}}
{{- $component := index . 1 -}}
{{- $pdb := index . 2 -}}
{{- if $pdb.enabled }}
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: ai-inference-{{ $component }}
  namespace: {{ include "ai-inference.namespace" $root }}
  labels:
    {{- include "ai-inference.componentLabels" (list $root $component) | nindent 4 }}
spec:
  maxUnavailable: {{ $pdb.maxUnavailable }}
  selector:
    matchLabels:
      {{- include "ai-inference.selectorLabels" (list $root $component) | nindent 6 }}
{{- end }}
{{- end -}}
