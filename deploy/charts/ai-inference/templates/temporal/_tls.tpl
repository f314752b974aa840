{{/*
The embedded Temporal server's mutual TLS (aiInference.temporal.embedded.tls): names and the mode.
The server listens on its pod's loopback; nginx (files/temporal-tls-proxy.conf) terminates TLS on the
Service's port and requires a client certificate of the module's Temporal CA. Each caller has its
own client certificate, in its own Secret.
*/}}

{{/* Callers of the embedded frontend with a client certificate each. */}}
{{- define "ai-inference.temporalClients" -}}
{{- list "worker" "watcher" "cli" | toJson -}}
{{- end -}}

{{- define "ai-inference.temporalCASecret" -}}ai-inference-temporal-ca{{- end -}}
{{- define "ai-inference.temporalServerSecret" -}}ai-inference-temporal-tls{{- end -}}
{{/* The client certificate Secret of a caller; call with "worker". */}}
{{- define "ai-inference.temporalClientSecret" -}}{{ printf "ai-inference-temporal-%s-tls" . }}{{- end -}}

{{/*
The CA's certificate revocation list in the terminator (tls.revocationList): the administrator's
Secret, its key mounted under this one name; files/temporal-tls-proxy.conf's ssl_crl.
*/}}
{{- define "ai-inference.temporalCRLDir" -}}/etc/ai-inference/temporal-crl{{- end -}}
{{- define "ai-inference.temporalCRLFile" -}}{{ include "ai-inference.temporalCRLDir" . }}/ca.crl{{- end -}}

{{/* The loopback port of the dev server; the Service's port (7233) is the terminator's. */}}
{{- define "ai-inference.temporalUpstreamPort" -}}7234{{- end -}}

{{/* CertManager (Auto where cert-manager.io/v1 is served) or Helm. */}}
{{- define "ai-inference.temporalTLSMode" -}}
{{- $mode := .Values.aiInference.temporal.embedded.tls.mode | toString -}}
{{- if not (has $mode (list "Auto" "CertManager" "Helm")) -}}
{{- fail (printf "aiInference.temporal.embedded.tls.mode must be Auto, CertManager or Helm, not %q" $mode) -}}
{{- end -}}
{{- if eq $mode "Auto" -}}
{{- if .Capabilities.APIVersions.Has "cert-manager.io/v1/Certificate" -}}CertManager{{- else -}}Helm{{- end -}}
{{- else -}}
{{- $mode -}}
{{- end -}}
{{- end -}}

{{/* DNS names of the Service ai-inference-temporal, in the server certificate. */}}
{{- define "ai-inference.temporalDNSNames" -}}
{{- $ns := include "ai-inference.namespace" . -}}
{{- list "ai-inference-temporal" (printf "ai-inference-temporal.%s" $ns) (printf "ai-inference-temporal.%s.svc" $ns) (printf "ai-inference-temporal.%s.svc.cluster.local" $ns) | toJson -}}
{{- end -}}

{{/* The name clients verify the server under (and send as SNI). */}}
{{- define "ai-inference.temporalServerName" -}}
{{- printf "ai-inference-temporal.%s.svc" (include "ai-inference.namespace" .) -}}
{{- end -}}

{{/*
The caller whose client certificate a pod mounts: the component of the template that includes the
Temporal volumes (templates/<component>/…), one of temporalClients.
*/}}
{{- define "ai-inference.temporalCaller" -}}
{{- $component := base (dir .Template.Name) -}}
{{- if not (has $component (include "ai-inference.temporalClients" . | fromJsonArray)) -}}
{{- fail (printf "%s mounts Temporal credentials but %q has no client certificate of the embedded Temporal" .Template.Name $component) -}}
{{- end -}}
{{- $component -}}
{{- end -}}
