"""The watcher became the observer (``worker/observer/``); this name stays for old imports."""

from worker.observer import Observer, run_observer

# The class this module exported before: same constructor, (api, client, settings).
Watcher = Observer

__all__ = ["Observer", "Watcher", "run_observer"]
