"""Stand-ins for the services ai-inference talks to, for local runs and tests."""
