"""The sampler judge: a speculative rejection sampler judged alone, through a small contract
(contract.py), against the exact output distribution of oracle.sampling's rules (rules.py)
(docs/DESIGN.md, "The sampler judge"; `python -m oracle sampler`)."""
