"""The Temporal UI as the progress view: the order's search attributes and its Markdown details panel."""

from __future__ import annotations

from workflows.order_state import OrderState, applied_ceiling

# What each step the workflow times covers (``OrderState.stepSeconds``, in the order they run); a
# step not listed here is shown under its own name.
STEP_LABELS = {
    "validation": "validate (read the order and its class)",
    "model facts": "resolve (model facts)",
    "planning": "plan (launch plan)",
    "apply": "apply (the workload's objects)",
    "replica ready": "volume, engine start, readiness (until a replica is ready)",
    "probe": "first probe of the API",
    "pods and probe": "volume, engine start, first /v1/models (until the API answers)",
}


def step_table(steps: dict[str, float]) -> list[str]:
    """The last reconcile, step by step: each step's seconds and its share of the reconcile.

    When an order's first reconcile gets it Ready, that is its time to Ready: the steps before the
    pods (validate … apply) are the module's own, the rest is mostly the engine loading the model.
    """
    total = sum(steps.values())
    lines = [
        "**Last reconcile, step by step:**",
        "",
        "| step | seconds | share |",
        "|---|---:|---:|",
    ]
    for step, seconds in steps.items():
        share = f"{seconds / total:.1%}" if total > 0 else "—"
        lines.append(f"| {STEP_LABELS.get(step, step)} | {seconds:.2f} | {share} |")
    lines.append(f"| **total** | **{total:.2f}** | |")
    return lines


def details_markdown(state: OrderState) -> str:
    """What the workflow's current-details panel shows: phase, plan, last reconcile, conditions."""
    device = state.plan.deviceClass if state.plan else None
    rows = "\n".join(
        f"| {c.type} | {c.status} | {c.reason} | {c.message.replace('|', '/')} |" for c in state.conditions
    )
    lines = [
        f"## {state.ref.namespace}/{state.ref.name}",
        "",
        f"**Phase:** {state.phase}" + (f" — {state.reason}" if state.reason else ""),
        "",
        f"**Class:** {state.className or '?'} · **Device:** {device or '—'} · **Replans:** {state.replanCount}"
        + (f" · **maxReplicas held at:** {ceiling} (preemption)" if (ceiling := applied_ceiling(state)) else ""),
        "",
    ]
    if state.stepSeconds:
        lines += [*step_table(state.stepSeconds), ""]
    if state.lastObserved:
        lines += [f"**Last observed:** {state.lastObserved}", ""]
    lines += ["| condition | status | reason | message |", "|---|---|---|---|", rows]
    return "\n".join(lines)
