"""docs/faq.md answers every reason: one `## <Reason>` heading per value, and no heading that is not a reason."""

from __future__ import annotations

import re
from pathlib import Path

from inference_api.reasons import EventReason, Reason

FAQ = Path(__file__).resolve().parents[2] / "docs" / "faq.md"
REASONS = {r.value for r in Reason}
EVENT_REASONS = {r.value for r in EventReason}


def _headings(level: int) -> list[str]:
    text = FAQ.read_text()
    # Headings outside fenced code blocks only.
    text = re.sub(r"^```.*?^```", "", text, flags=re.M | re.S)
    return re.findall(rf"^{'#' * level} (.+?)\s*$", text, re.M)


def test_every_reason_has_its_entry() -> None:
    headings = _headings(2)
    missing = sorted((REASONS | EVENT_REASONS) - set(headings))
    assert not missing, f"docs/faq.md has no `## <reason>` entry for {missing}"


def test_every_entry_is_a_reason_and_appears_once() -> None:
    headings = _headings(2)
    strangers = sorted(set(headings) - REASONS - EVENT_REASONS)
    assert not strangers, f"docs/faq.md headings that are not a Reason or an EventReason: {strangers}"
    assert len(headings) == len(set(headings)), "a reason has two entries"
    assert _headings(3) == [], "entries are flat: one level-2 heading per reason"


def test_every_entry_names_its_condition_and_whether_waiting_helps() -> None:
    text = FAQ.read_text()
    entries = re.split(r"^## ", text, flags=re.M)[1:]
    for entry in entries:
        name, body = entry.split("\n", 1)
        assert "**Waiting helps:**" in body, name
        assert "**Condition:**" in body or "**An Event**" in body, name
        assert len(body.split()) >= 20, f"{name}: say what it means and what it asks"


def test_the_summary_table_lists_every_reason_once() -> None:
    text = FAQ.read_text()
    rows = re.findall(r"^\| \[(\w+)\]\(#(\w+)\) \|", text, re.M)
    assert sorted(name for name, _ in rows) == sorted(REASONS | EVENT_REASONS)
    for name, anchor in rows:
        assert anchor == name.lower()
