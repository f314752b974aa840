"""The order's Temporal UI details panel: the last reconcile step by step, which on the way to Ready is the
order's time to Ready (``workflows/order_details.py``)."""

from __future__ import annotations

from inference_api.payloads import OrderRef
from workflows.order_details import STEP_LABELS, details_markdown, step_table
from workflows.order_state import OrderState

STEPS = {"validation": 0.2, "model facts": 0.1, "planning": 0.9, "apply": 1.0, "pods and probe": 127.8}


def test_each_step_has_its_seconds_and_its_share_in_the_order_it_ran() -> None:
    rows = [line for line in step_table(STEPS) if line.startswith("| ") and not line.startswith("| step")]
    assert [row.split(" | ")[0].removeprefix("| ") for row in rows[:-1]] == [STEP_LABELS[s] for s in STEPS]
    assert rows[0] == f"| {STEP_LABELS['validation']} | 0.20 | 0.2% |"
    assert rows[4] == f"| {STEP_LABELS['pods and probe']} | 127.80 | 98.3% |"
    assert rows[-1] == "| **total** | **130.00** | |"


def test_a_step_without_a_label_keeps_its_name_and_zero_seconds_do_not_divide() -> None:
    assert "| something new | 0.00 | — |" in step_table({"something new": 0.0})


def test_the_panel_shows_the_table_only_once_a_reconcile_timed_steps() -> None:
    state = OrderState(ref=OrderRef(namespace="support", name="tiny", uid="u-1"))
    assert "step by step" not in details_markdown(state)
    state.stepSeconds = dict(STEPS)
    panel = details_markdown(state)
    assert "**Last reconcile, step by step:**" in panel
    assert "| **total** | **130.00** | |" in panel
    # The conditions table follows, as before.
    assert panel.index("step by step") < panel.index("| condition | status | reason | message |")
