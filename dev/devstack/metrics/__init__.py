"""The metrics parts of the local stack: Prometheus and prometheus-adapter, built from Go modules.

* ``rules``: the chart's alert rules as a Prometheus rule file (rendered with the pinned helm from
  the chart's PrometheusRule, never copied) and the adapter's rule file the chart ships;
* ``targets``: file-based service discovery of the stand-in runtimes, one target per placed pod of
  an order, labelled with the pod's namespace and name (what the adapter maps series to);
* ``stack``: starts Prometheus and the adapter beside a local cluster and registers the adapter as
  the ``v1beta1.custom.metrics.k8s.io`` APIService, so the HPA controller scales on vLLM's queue.

Dev/test only, like the rest of ``devstack``.
"""
