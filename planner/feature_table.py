"""The user guide's table of model families x serving features, generated from recipes/model-families.yaml.

``python -m planner.feature_table`` prints it; docs/user-guide.md holds it between the markers
``BEGIN`` and ``END`` below, and tests/docs/test_feature_table.py fails when the two disagree. Pure.
"""

from __future__ import annotations

from planner.recipes import RecipeBook, load_recipe_book

BEGIN = "<!-- BEGIN model-families (generated: python -m planner.feature_table) -->"
END = "<!-- END model-families -->"


def _cell(value: str | None) -> str:
    return f"yes (`{value}`)" if value else "no"


def markdown_table(book: RecipeBook | None = None) -> str:
    """One row per model family, in the table's order (the first family that matches a name wins)."""
    book = book or load_recipe_book()
    lines = [
        "| Model family | Examples | Tool calls (`--tool-call-parser`) | Reasoning (`--reasoning-parser`) "
        "| Chat template |",
        "|---|---|---|---|---|",
    ]
    for name, family in book.models.families.items():
        examples = ", ".join(f"`{e}`" for e in family.examples)
        template = f"`{family.chatTemplate}`" if family.chatTemplate else "the repository's"
        lines.append(
            f"| `{name}` | {examples} | {_cell(family.toolCallParser)} | {_cell(family.reasoningParser)} | {template} |"
        )
    lines.append('| any other chat model | | no (`tool_choice: "auto"` is answered 400) | no | the repository\'s |')
    return "\n".join(lines)


def block(book: RecipeBook | None = None) -> str:
    """The table between its markers, as the user guide holds it."""
    return f"{BEGIN}\n{markdown_table(book)}\n{END}"


if __name__ == "__main__":
    print(block())
