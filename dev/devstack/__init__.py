"""The local stack: a real Kubernetes control plane built from Go modules, stand-ins, ``ai-inference dev``.

Dev-only. It ships as its own distribution (``dev/pyproject.toml``, ``ai-inference-dev``) so the
production wheel carries none of it; installing it adds the ``dev`` and ``cluster`` sub-commands to
``ai-inference`` through the ``ai_inference.commands`` entry-point group.
"""
