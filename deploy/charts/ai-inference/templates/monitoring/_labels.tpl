{{- /*
Labels of the objects a Prometheus selects (PodMonitors, the PrometheusRule): the module's, Deckhouse's
prometheus: main, the extra ones given (monitoring.labels: kube-prometheus-stack's Prometheus selects
its release's, release: <its release name>, unless its *SelectorNilUsesHelmValues are false), and
those of the object (a dict). Later ones win: no key is rendered twice.
Call with (list $ (dict "component" "rules")).
*/ -}}
{{- define "ai-inference.monitoringLabels" -}}
{{- $root := index . 0 -}}
{{- $labels := fromYaml (include "ai-inference.labels" $root) -}}
{{- $labels = mustMergeOverwrite $labels (dict "prometheus" "main") (deepCopy ($root.Values.monitoring.labels | default dict)) (index . 1) -}}
{{- toYaml $labels -}}
{{- end -}}
