"""The judge: the backend contract (contract.py), the one runner (runner.py), the one judge of
two runs (compare.py, with decisions.py and report.py), the cache-free check, the noise twin
and the drift verdict, and the verdicts built on the runner (cases.py). Imports the reference
(the top level of oracle/), never the CLI (tests/test_imports.py)."""
