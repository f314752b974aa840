"""What secret scans look for in workflow histories, logs, events, errors and HTTP answers.

``needles(tokens=..., key_files=...)``: each bearer token as written and base64-encoded (how a
Secret's data or a dumped header carries it), and each PEM private key by the base64 lines of its
body (any dump of the key carries them, whatever wraps it). ``assert_clean(text, needles, where)``
fails naming the kind of secret found, never the secret.
"""

from __future__ import annotations

import base64
from collections.abc import Iterable
from pathlib import Path

# Shorter lines (a PEM's last one) could match by chance: only full-length base64 lines count.
MIN_KEY_LINE = 40


def needles(*, tokens: Iterable[str] = (), key_files: Iterable[Path] = ()) -> dict[str, str]:
    """secret text -> what it is (for the failure message)."""
    found: dict[str, str] = {}
    for i, token in enumerate(tokens):
        found[token] = f"token #{i}"
        found[base64.b64encode(token.encode()).decode()] = f"token #{i} (base64)"
    for path in key_files:
        for line in path.read_text().splitlines():
            if not line.startswith("-----") and len(line) >= MIN_KEY_LINE:
                found[line] = f"private key {path.name}"
    return found


def assert_clean(text: str, secrets: dict[str, str], where: str) -> None:
    leaked = sorted({what for secret, what in secrets.items() if secret in text})
    assert not leaked, f"{where} carries {', '.join(leaked)}"
