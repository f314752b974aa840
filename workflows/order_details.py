"""The Temporal UI as the progress view: the order's search attributes and its Markdown details panel."""

from __future__ import annotations

from workflows.order_state import OrderState, applied_ceiling


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
        lines += ["**Last reconcile:** " + " · ".join(f"{k} {v:.1f}s" for k, v in state.stepSeconds.items()), ""]
    if state.lastObserved:
        lines += [f"**Last observed:** {state.lastObserved}", ""]
    lines += ["| condition | status | reason | message |", "|---|---|---|---|", rows]
    return "\n".join(lines)
