"""The user guide's table of model families x serving features is the one the recipe tables generate."""

from __future__ import annotations

from pathlib import Path

from planner.feature_table import BEGIN, END, block, markdown_table
from planner.recipes import load_recipe_book

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "user-guide.md"


def test_the_user_guide_holds_the_table_the_recipes_generate() -> None:
    text = GUIDE.read_text()
    assert text.count(BEGIN) == 1, f"docs/user-guide.md needs exactly one {BEGIN}"
    held = text[text.index(BEGIN) : text.index(END) + len(END)]
    assert held == block(), "the table in docs/user-guide.md is stale: paste `python -m planner.feature_table`"


def test_the_table_has_a_row_per_family_saying_its_parsers() -> None:
    book = load_recipe_book()
    rows = markdown_table(book).splitlines()[2:]
    assert len(rows) == len(book.models.families) + 1  # and the row of every other model
    for row, (name, family) in zip(rows, book.models.families.items(), strict=False):
        assert row.startswith(f"| `{name}` |")
        assert (f"`{family.toolCallParser}`" in row) is (family.toolCallParser is not None)
        assert (f"`{family.reasoningParser}`" in row) is (family.reasoningParser is not None)


def test_a_changed_recipe_row_makes_the_table_disagree() -> None:
    book = load_recipe_book()
    changed = book.model_copy(deep=True)
    changed.models.families["qwen3"].toolCallParser = "qwen3_xml"
    assert block(changed) != block(book)
