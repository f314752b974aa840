"""Every object of a few representative orders, compared byte for byte with tests/builders/golden/."""

from __future__ import annotations

import difflib

import pytest

from tests.builders.golden import CASES, GOLDEN_DIR, REGENERATE, Case, render


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_builders_match_the_golden_manifests(case: Case) -> None:
    directory = GOLDEN_DIR / case.name
    files = render(case)
    on_disk = {path.name: path.read_text() for path in sorted(directory.glob("*.yaml"))}
    hint = f"If the change is intended, regenerate with `{REGENERATE}` and review the diff."
    assert sorted(files) == sorted(on_disk), (
        f"{case.name}: the builders make {sorted(files)}, the golden directory holds {sorted(on_disk)}. {hint}"
    )
    for file_name, text in files.items():
        if text != on_disk[file_name]:
            diff = "".join(
                difflib.unified_diff(
                    on_disk[file_name].splitlines(keepends=True),
                    text.splitlines(keepends=True),
                    fromfile=f"golden/{case.name}/{file_name}",
                    tofile="built",
                )
            )
            pytest.fail(f"{case.name}/{file_name} differs from the golden manifest. {hint}\n{diff}")


def test_rendering_is_deterministic() -> None:
    for case in CASES:
        assert render(case) == render(case)
