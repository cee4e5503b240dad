"""The work of each plan kind (oracle/judge/plans/plan.py), one module a kind, each `run(plan, ex, v)`
filling the verdict `verdict.judge` made for it; probe_start.py begins the drift probe beside the
cases (the backend, pairs and probe kinds), probe_finish.py fits it and waits for it after them."""
