"""The module's API: its resources, settings, payloads and reasons."""

from __future__ import annotations

DISTRIBUTION = "ai-inference"


def package_version() -> str:
    """The installed distribution's version (package metadata; "unknown" when not installed)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(DISTRIBUTION)
    except PackageNotFoundError:
        return "unknown"
