"""Stand-ins for the services ai-inference talks to, for local runs and tests.

* ``catalog_service`` — the ai-models lookup API;
* ``runtime`` — an OpenAI-compatible server answering for an order's replicas (kwok pods run
  nothing), with auth and failure injection.
"""
