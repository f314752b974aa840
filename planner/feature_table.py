"""The user guide's table of model families x serving features, generated from recipes/model-families.yaml.

``python -m planner.feature_table`` prints it; docs/user-guide.md holds it between the markers
``BEGIN`` and ``END`` below, and tests/docs/test_feature_table.py fails when the two disagree. Pure. The last
column is the structured-output backend a family's recipe launches with (chatArgs, or toolCallArgs where it
compiles a tool-call parser).
"""

from __future__ import annotations

import json

from planner.recipes import ArgValue, RecipeBook, load_recipe_book

BEGIN = "<!-- BEGIN model-families (generated: python -m planner.feature_table) -->"
END = "<!-- END model-families -->"
STRUCTURED_OUTPUTS = "--structured-outputs-config"


def _cell(value: str | None) -> str:
    return f"yes (`{value}`)" if value else "no"


def _backend(args: dict[str, ArgValue]) -> str:
    """The structured-output backend a recipe with ``args`` launches with (vLLM's default: auto)."""
    config = args.get(STRUCTURED_OUTPUTS)
    backend = json.loads(config).get("backend", "auto") if isinstance(config, str) else "auto"
    return f"`{backend}`"


def markdown_table(book: RecipeBook | None = None) -> str:
    """One row per model family, in the table's order (the first family that matches a name wins)."""
    book = book or load_recipe_book()
    chat_args = book.models.chatArgs
    tool_args = {**chat_args, **book.models.toolCallArgs}
    lines = [
        "| Model family | Examples | Tool calls (`--tool-call-parser`) | Reasoning (`--reasoning-parser`) "
        "| Chat template | Structured output (backend) |",
        "|---|---|---|---|---|---|",
    ]
    for name, family in book.models.families.items():
        examples = ", ".join(f"`{e}`" for e in family.examples)
        template = f"`{family.chatTemplate}`" if family.chatTemplate else "the repository's"
        backend = _backend(tool_args if family.toolCallParser else chat_args)
        lines.append(
            f"| `{name}` | {examples} | {_cell(family.toolCallParser)} | {_cell(family.reasoningParser)} | {template} "
            f"| {backend} |"
        )
    lines.append(
        f"| any other chat model | | no (`tools` are answered 400) | no | the repository's | {_backend(chat_args)} |"
    )
    return "\n".join(lines)


def block(book: RecipeBook | None = None) -> str:
    """The table between its markers, as the user guide holds it."""
    return f"{BEGIN}\n{markdown_table(book)}\n{END}"


if __name__ == "__main__":
    print(block())
