"""The activity retry policies of the workflows, and why none of them gives up on an outage.

A transient outage — the API server restarting or partitioned away, the planner service down, a
frozen etcd — lasts seconds to minutes. A retry policy with ``maximum_attempts`` gives up after a
few seconds (attempts 1 s, 2 s, 4 s apart); its ``ActivityError`` then reaches the workflow, and an
error a workflow does not catch fails the whole run: the order loses its executor because a call
was refused a few times. So every activity that talks to the cluster or a service retries until it
answers (``UNTIL_IT_ANSWERS``: 1 s doubling to 30 s, no attempt limit); an answer that retrying
cannot change is raised non-retryable by the activity itself and handled by the workflow as a
condition (WorkloadRefused, ...). A bounded policy stays only where the workflow catches its
exhaustion and carries on (the first plan of an order: PlannerUnavailable, then a plan again on a
backoff). tests/faults/test_outages.py holds every step of both workflows to this.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio.common import RetryPolicy

# Tried until it answers: 1 s, doubling to 30 s between attempts, with no limit on their number.
UNTIL_IT_ANSWERS = RetryPolicy(initial_interval=timedelta(seconds=1), maximum_interval=timedelta(seconds=30))
# The name the order workflow knows it by (its Kubernetes reads and writes).
K8S_RETRY = UNTIL_IT_ANSWERS
