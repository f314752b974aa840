"""A stand-in ``kubectl`` for running the admin guide's shell blocks without a cluster: the few Secret
commands they use, against Secrets kept in a JSON file (``FAKE_KUBECTL_STATE``). Anything else is
refused loudly (exit 2), so a block that starts using another command fails its test rather than
pass untried.

  kubectl -n NS get secret NAME -o jsonpath='{.data.KEY}'        (KEY with its dots escaped: tls\\.crt)
  kubectl -n NS create secret generic NAME --from-file=[KEY=]PATH [--dry-run=client -o yaml]
  kubectl -n NS create secret tls NAME --cert PATH --key PATH [--dry-run=client -o yaml]
  kubectl apply -f -                                              (a Secret's YAML on stdin)
"""

from __future__ import annotations

import base64
import json
import os
import re
import sys
from pathlib import Path
from typing import Any

import yaml


def _state_file() -> Path:
    return Path(os.environ["FAKE_KUBECTL_STATE"])


def read_secrets(path: Path) -> dict[str, dict[str, Any]]:
    """The Secrets kept in ``path``: ``{"namespace/name": {"type": ..., "data": {key: base64}}}``."""
    if not path.is_file():
        return {}
    secrets: dict[str, dict[str, Any]] = json.loads(path.read_text())
    return secrets


def write_secrets(path: Path, secrets: dict[str, dict[str, Any]]) -> None:
    path.write_text(json.dumps(secrets, indent=1, sort_keys=True))


def _refuse(argv: list[str]) -> int:
    print(f"fake kubectl: unsupported command: kubectl {' '.join(argv)}", file=sys.stderr)
    return 2


def _secret_doc(namespace: str, name: str, kind: str, data: dict[str, str]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": namespace},
            "type": kind, "data": data}  # fmt: skip


def main(argv: list[str]) -> int:
    args = list(argv)
    namespace = "default"
    if len(args) >= 2 and args[0] in ("-n", "--namespace"):
        namespace = args[1]
        args = args[2:]
    state = _state_file()
    secrets = read_secrets(state)

    if args[:2] == ["get", "secret"] and len(args) == 5 and args[3] == "-o":
        match = re.fullmatch(r"jsonpath=\{\.data\.((?:[^.\\]|\\\.)+)\}", args[4])
        if not match:
            return _refuse(argv)
        key = match.group(1).replace("\\.", ".")
        secret = secrets.get(f"{namespace}/{args[2]}")
        if secret is None:
            print(f'Error from server (NotFound): secrets "{args[2]}" not found', file=sys.stderr)
            return 1
        sys.stdout.write(secret["data"].get(key, ""))
        return 0

    if args[:2] == ["create", "secret"] and len(args) >= 4:
        kind, name, rest = args[2], args[3], args[4:]
        dry_run = False
        if rest[-3:] == ["--dry-run=client", "-o", "yaml"]:
            dry_run, rest = True, rest[:-3]
        data: dict[str, str] = {}
        if kind == "generic" and rest and all(r.startswith("--from-file=") for r in rest):
            secret_type = "Opaque"
            for option in rest:
                spec = option.removeprefix("--from-file=")
                key, _, path = spec.rpartition("=") if "=" in spec else (Path(spec).name, "", spec)
                data[key] = base64.b64encode(Path(path).read_bytes()).decode()
        elif kind == "tls" and len(rest) == 4 and rest[0] == "--cert" and rest[2] == "--key":
            secret_type = "kubernetes.io/tls"
            data["tls.crt"] = base64.b64encode(Path(rest[1]).read_bytes()).decode()
            data["tls.key"] = base64.b64encode(Path(rest[3]).read_bytes()).decode()
        else:
            return _refuse(argv)
        doc = _secret_doc(namespace, name, secret_type, data)
        if dry_run:
            sys.stdout.write(yaml.safe_dump(doc))
            return 0
        if f"{namespace}/{name}" in secrets:
            print(f'error: failed to create secret secrets "{name}" already exists', file=sys.stderr)
            return 1
        secrets[f"{namespace}/{name}"] = {"type": secret_type, "data": data}
        write_secrets(state, secrets)
        print(f"secret/{name} created")
        return 0

    if args == ["apply", "-f", "-"]:
        doc = yaml.safe_load(sys.stdin.read())
        if not isinstance(doc, dict) or doc.get("kind") != "Secret":
            return _refuse(argv)
        meta = doc["metadata"]
        key = f"{meta.get('namespace', namespace)}/{meta['name']}"
        current = secrets.get(key)
        if current is not None and current["type"] != doc["type"]:
            print("The Secret is invalid: type: Invalid value: field is immutable", file=sys.stderr)
            return 1
        secrets[key] = {"type": doc["type"], "data": dict(doc.get("data") or {})}
        write_secrets(state, secrets)
        print(f"secret/{meta['name']} {'configured' if current else 'created'}")
        return 0

    return _refuse(argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
