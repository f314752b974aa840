"""The observer (``ai-inference watch``): informers, health probes and the resync; signals only what
an order's workflow acts on. See ``observer.py`` for the whole, ``decisions.py`` for the rules."""

from worker.observer.observer import Observer, run_observer

__all__ = ["Observer", "run_observer"]
