"""The release fingerprint: what an order's reconcile depends on besides the order and its class.

The module's version, the runtime release the recipe tables ship and the module settings that shape
an order (catalog mode, exposure, health timings, planner and catalog options). The worker's
read step returns it with the order, the workflow keeps it in a search attribute, and the
observer's resync signals every order whose fingerprint is not the one in force: a module upgrade,
a new runtime release or a settings change reaches existing orders without an edit.
"""

from __future__ import annotations

import hashlib
import json
from importlib import metadata

from inference_api.payloads import OrderTimings
from inference_api.settings import CatalogMode, ModuleSettings
from planner.recipes import RecipeBook, load_recipe_book

DISTRIBUTION = "ai-inference"


def module_version() -> str:
    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:  # a source tree that was never installed
        return "0+unknown"


def release_fingerprint(settings: ModuleSettings, book: RecipeBook | None = None) -> str:
    """A short, stable digest (no secret enters it: settings hold addresses and timings only)."""
    tables = book or load_recipe_book(settings.planner.recipesDirectory)
    shaping = settings.model_dump(mode="json", exclude={"temporal"})
    document = {
        "module": module_version(),
        "runtime": tables.compiled.runtime.model_dump(mode="json"),
        "settings": shaping,
    }
    digest = hashlib.sha256(json.dumps(document, sort_keys=True).encode()).hexdigest()
    return digest[:16]


def order_timings(settings: ModuleSettings) -> OrderTimings:
    """The settings an order's reconcile acts on, as the workflow reads them."""
    health = settings.health
    return OrderTimings(
        healthIntervalSeconds=health.intervalSeconds,
        failureThreshold=health.failureThreshold,
        probeTimeoutSeconds=health.probeTimeoutSeconds,
        serveWaitSeconds=health.serveWaitSeconds,
        catalogEnabled=settings.catalog.mode == CatalogMode.ENABLED,
    )
