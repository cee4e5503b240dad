"""The judge, in rooms layered shrinker -> plans -> probe -> comparison -> runner.py and scenario.py
(tests/test_imports.py): the one runner (runner.py) and the Case type (scenario.py); comparison/, the
one judge of two runs (compare.py, with decisions.py, malformed.py, report.py) and the cache-free
check; probe/, the noise twin, the drift and precision verdicts and their calibration; plans/, the
plans with their executor (plan.py), the one verdict (verdict.py), the verdicts built on the runner
(cases.py, invariance.py) and each kind's work (kinds/); shrinker/, a failing verdict's smallest case.
Imports the runtime (oracle/runtime/) and the reference (the top level of oracle/), never the CLI."""
