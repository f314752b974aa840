"""The compiled recipe tables (package data, read by ``planner.recipes`` through importlib.resources):

* ``runtime-recipes.compiled.yaml`` — compiled vLLM recipes keyed by (hardware family, model);
* ``recipe-taxonomy.yaml`` — model families (chat, embedding, rerank) and their default arguments;
* ``platform-hardware-families.yaml`` — product names → hardware family, compute capability, dtypes.

A top-level folder, as the project's layout has it: an administrator reads and diffs the tables
without knowing the planner's code, and the wheel ships them under the same name (``recipes/``).
"""
