"""``python -m tests.builders.golden --update`` rewrites the golden manifests."""

from __future__ import annotations

import argparse

from tests.builders.golden import update


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.builders.golden", description=__doc__)
    parser.add_argument("--update", action="store_true", help="rewrite tests/builders/golden/<case>/<kind>.yaml")
    args = parser.parse_args()
    if not args.update:
        parser.error("pass --update to rewrite the golden manifests")
    update()


if __name__ == "__main__":
    main()
