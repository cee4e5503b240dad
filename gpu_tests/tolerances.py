"""The GPU parity tests use the one tolerance table, oracle.compare.TOLERANCES (keyed by
dtype; see its comment for how the bfloat16 row was measured)."""
from oracle.compare import TOLERANCES  # noqa: F401  (re-exported)
