"""Activities around the preemption workflow: reaching it from an order, exporting its metrics.

A workflow cannot signal-with-start another workflow, and an order's report must start the
preemption workflow of its device class when none runs yet, so the order workflow reports
through :meth:`PreemptionActivities.report_scaling`, which signal-with-starts it with the
worker's own client (``activity.client()``) on the worker's task queue.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import structlog
from temporalio import activity

from activities.metrics import PREEMPTION_METRICS, PreemptionMetricsCollector
from inference_api.preemption import MemberReport, PreemptionMetrics, preemption_workflow_id
from workflows import activity_names as act
from workflows.preemption import PreemptionState, PreemptionTimings, PreemptionWorkflow

log = structlog.get_logger(__name__)


class PreemptionActivities:
    def __init__(
        self,
        metrics: PreemptionMetricsCollector = PREEMPTION_METRICS,
        timings: PreemptionTimings | None = None,
    ) -> None:
        self.metrics = metrics
        # The timings a preemption workflow starts with (tests make them short).
        self.timings = timings or PreemptionTimings()

    def all(self) -> list[Callable[..., Any]]:
        return [self.report_scaling, self.publish_preemption_metrics]

    @activity.defn(name=act.REPORT_SCALING)
    async def report_scaling(self, report: MemberReport) -> None:
        task_queue = activity.info().task_queue
        await activity.client().start_workflow(
            PreemptionWorkflow.run,
            PreemptionState(deviceClass=report.deviceClass, timings=self.timings),
            id=preemption_workflow_id(task_queue, report.deviceClass),
            task_queue=task_queue,
            start_signal="observe",
            start_signal_args=[report],
            static_summary=f"preemption on device class {report.deviceClass}",
        )
        log.info(
            "scaling reported",
            order=report.ref.key,
            device_class=report.deviceClass,
            desired=report.desired,
            placed=report.placed,
            leaving=report.leaving,
        )

    @activity.defn(name=act.PUBLISH_PREEMPTION_METRICS)
    async def publish_preemption_metrics(self, metrics: PreemptionMetrics) -> None:
        self.metrics.set(metrics)
