"""Links between the docs resolve: every relative link names a file that exists, and every
`#anchor` names a heading of its page (GitHub's slugs)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
PAGES = [
    *(
        REPO_ROOT / "docs" / name
        for name in (
            "user-guide.md",
            "admin-guide.md",
            "faq.md",
            "reference.md",
            "examples.md",
            "local-run.md",
            "operations.md",
        )
    ),
    REPO_ROOT / "README.md",
]


def slug(heading: str) -> str:
    text = heading.strip().lower().replace("`", "")
    text = re.sub(r"[^a-z0-9 _-]", "", text)
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = re.sub(r"^```.*?^```", "", page.read_text(), flags=re.M | re.S)
    return {slug(h) for h in re.findall(r"^#{1,6} (.+)$", text, re.M)}


def links(page: Path) -> list[str]:
    text = re.sub(r"^```.*?^```", "", page.read_text(), flags=re.M | re.S)
    return re.findall(r"\]\(([^)\s]+)\)", text)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_links_resolve(page: Path) -> None:
    found = links(page)
    for link in found:
        if re.match(r"^[a-z]+://", link) or link.startswith("mailto:"):
            continue
        path, _, anchor = link.partition("#")
        target = (page.parent / path).resolve() if path else page
        assert target.exists(), f"{page.name}: link {link!r} names no file"
        if anchor:
            assert target.suffix == ".md", f"{page.name}: anchor on a non-Markdown target {link!r}"
            assert anchor in anchors(target), f"{page.name}: {link!r} names no heading of {target.name}"


def test_the_user_facing_pages_link_each_other() -> None:
    for name in ("user-guide.md", "admin-guide.md"):
        text = (REPO_ROOT / "docs" / name).read_text()
        for other in ("examples.md", "faq.md", "reference.md"):
            assert f"]({other}" in text, f"{name} does not link {other}"
