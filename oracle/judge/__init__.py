"""The judge: the backend contract (contract.py), the one judge of two runs (compare.py, with
decisions.py), the cache-free check, the noise twin and the drift verdict, and the one runner
with the verdicts built on it (cases.py). Imports the reference (the top level of oracle/),
never the CLI (tests/test_imports.py)."""
