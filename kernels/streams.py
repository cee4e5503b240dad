"""A request's uniforms on the host: drawn from numpy PCG64 seeded like the reference
(oracle.rng_trace.RequestRng), or a replay list. Rounds run ahead of the host's knowledge
of how many uniforms were used, so the device gets a window of the stream starting at
the host's last known cursor, and keeps the exact cursor itself."""

from __future__ import annotations

import numpy as np

from oracle.errors import OracleError
from oracle.rng_trace import uniform_source


class UniformStream:
    def __init__(self, rid, seed: int | None = None, replay=None):
        self.rid = rid
        self.gen, self.replay = uniform_source(seed, replay)
        self.drawn: list[float] = []  # generator values drawn so far, from index `base`
        self.base = 0
        self.consumed = 0  # uniforms used by collected rounds

    def window(self, n: int) -> np.ndarray:
        """Uniforms consumed..consumed+n-1 (NaN past the end of a replay list)."""
        lo = self.consumed
        if self.replay is not None:
            w = np.full(n, np.nan)
            got = self.replay[lo : lo + n]
            w[: len(got)] = got
            return w
        while self.base + len(self.drawn) < lo + n:
            self.drawn.append(float(self.gen.random()))
        return np.array(self.drawn[lo - self.base : lo - self.base + n], dtype=np.float64)

    def value(self, index: int) -> float:
        if self.replay is not None:
            if index >= len(self.replay):
                raise OracleError(f"replay of request {self.rid} ran out of uniforms after {len(self.replay)}")
            return self.replay[index]
        return self.drawn[index - self.base]

    def consume(self, n: int) -> None:
        self.consumed += n
        drop = self.consumed - self.base
        if self.replay is None and drop > 256:  # forget values no round can read again
            del self.drawn[:drop]
            self.base = self.consumed
