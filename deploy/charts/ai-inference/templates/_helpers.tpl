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

{{- define "ai-inference.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{- define "ai-inference.serviceAccountName" -}}
{{- printf "ai-inference-%s" . -}}
{{- end -}}

{{- define "ai-inference.catalogEnabled" -}}
{{- $mode := .Values.catalog.mode | toString -}}
{{- if not (has $mode (list "Enabled" "None")) -}}
{{- fail (printf "catalog.mode must be Enabled or None, not %q" $mode) -}}
{{- end -}}
{{- if eq $mode "Enabled" -}}true{{- end -}}
{{- end -}}

{{/* The planner URL the controller calls: the value, or the Service this chart ships. */}}
{{- define "ai-inference.plannerBaseURL" -}}
{{- if .Values.aiInference.planner.baseURL -}}
{{- .Values.aiInference.planner.baseURL -}}
{{- else -}}
{{- printf "http://ai-inference-planner.%s.svc:%v" (include "ai-inference.namespace" .) .Values.planner.port -}}
{{- end -}}
{{- end -}}

{{/*
Module settings as environment variables: AI_INFERENCE_<FIELD> with "__" between nested keys
(inference_api/settings.py). The same list for every process of the module.
*/}}
{{- define "ai-inference.settingsEnv" -}}
{{- $v := .Values.aiInference -}}
- name: AI_INFERENCE_MODULENAMESPACE
  value: {{ include "ai-inference.namespace" . | quote }}
- name: AI_INFERENCE_CATALOG__MODE
  value: {{ .Values.catalog.mode | toString | quote }}
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
- name: AI_INFERENCE_PLANNER__BASEURL
  value: {{ include "ai-inference.plannerBaseURL" . | quote }}
- name: AI_INFERENCE_PLANNER__TIMEOUTSECONDS
  value: {{ $v.planner.timeoutSeconds | toString | quote }}
- name: AI_INFERENCE_PLANNER__RUNTIMEFALLBACK__ENABLED
  value: {{ $v.planner.runtimeFallback.enabled | toString | quote }}
- name: AI_INFERENCE_TEMPORAL__ADDRESS
  value: {{ $v.temporal.address | quote }}
- name: AI_INFERENCE_TEMPORAL__NAMESPACE
  value: {{ $v.temporal.namespace | quote }}
- name: AI_INFERENCE_TEMPORAL__TASKQUEUE
  value: {{ $v.temporal.taskQueue | quote }}
- name: AI_INFERENCE_TEMPORAL__TLSENABLED
  value: {{ $v.temporal.tls.enabled | toString | quote }}
- name: AI_INFERENCE_EXPOSURE__DOMAINTEMPLATE
  value: {{ $v.exposure.domainTemplate | quote }}
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
{{- end -}}

{{/* Temporal TLS: volume and mount (worker, watcher). */}}
{{- define "ai-inference.temporalTLSVolume" -}}
{{- if .Values.aiInference.temporal.tls.enabled }}
- name: temporal-tls
  secret:
    secretName: {{ required "aiInference.temporal.tls.secretName is required when TLS is enabled" .Values.aiInference.temporal.tls.secretName }}
{{- end }}
{{- end -}}

{{- define "ai-inference.temporalTLSMount" -}}
{{- if .Values.aiInference.temporal.tls.enabled }}
- name: temporal-tls
  mountPath: /etc/ai-inference/temporal-tls
  readOnly: true
{{- end }}
{{- end -}}

{{/* Pod-level settings shared by the Deployments. */}}
{{- define "ai-inference.podCommon" -}}
securityContext:
  {{- toYaml .Values.podSecurityContext | nindent 2 }}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
{{- with .Values.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}
