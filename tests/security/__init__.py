"""Security checks: TLS and credentials of the module's connections (Temporal, planner, catalog).

``leaks`` holds what the secret scans look for; ``tls`` makes TLS material and a TLS-terminating
proxy for the connection tests.
"""
