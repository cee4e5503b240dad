"""The work of each plan kind (oracle/judge/plans/plan.py), one module a kind, each `run(plan, ex, v)`
filling the verdict `verdict.judge` made for it; probing.py schedules the drift probe beside the
cases (the backend, pairs and probe kinds)."""
