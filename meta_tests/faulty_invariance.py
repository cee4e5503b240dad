"""Backends that declare themselves batch-invariant (oracle/runtime/contract.py `batch_invariant`), for the
exactness tier's own tests (meta_tests/test_invariance.py):

    make_invariant_reference   NOT a fault: the FP32 reference, which is batch-invariant by
                               construction (per-row products), declaring it
    make_ulp_when_shared       a call of more than two rows moves every output state by one ULP
                               (as a GEMM whose tiles change with M): within the float32 row of
                               the twin verdict, caught only by the exactness tier

Both run on the NumPy reference, so the tier is tested without torch. The torch faults that break
invariance in one operation (split-K by M, an attention split by M, an RMSNorm block by M) are
meta_tests/faulty_kernels.py's make_inv_*.

    python -m oracle check --backend meta_tests.faulty_invariance:make_ulp_when_shared
"""

from __future__ import annotations

import numpy as np

from oracle import phases

from .faulty import FaultyBackend


class InvariantReference(FaultyBackend):
    fault = "none (invariant reference)"
    batch_invariant = True

    @property
    def name(self):
        return "reference-invariant"


class UlpWhenShared(InvariantReference):
    """Declares invariance, but a row's loop output depends on the call's row count."""

    fault = "1 ULP when a call has more than 2 rows"
    exact, dtype, host_rng = False, "float32", True

    @property
    def name(self):
        return "ulp-when-shared"

    def run_call(self, st, rows):
        phases.run_call(st, rows)
        if len(rows) > 2:
            for i, o, j in rows:
                depth, h = st.hidden[(i, o)]
                st.hidden[(i, o)] = (depth, np.nextafter(h, np.float32(np.inf)).astype(np.float32))


def make_invariant_reference():
    return InvariantReference()


def make_ulp_when_shared():
    return UlpWhenShared()
