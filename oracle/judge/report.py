"""What a comparison reports: `Check` (one named property, held or not, with the place of
its first failure) and `Report` (a comparison's checks and counters), and `rel_err`, the
relative error every numeric check measures. A leaf, so that the verdicts built beside the
judge (oracle/judge/cache_free.py) need not import it (oracle/judge/compare.py)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

CHECKS = (
    "rounds",
    "schedule",
    "malformed",
    "decisions",
    "tokens",
    "rng_events",
    "kv_writes",
    "draft_logits",
    "verify_logits",
    "stats",
)


@dataclass(slots=True)
class Check:
    name: str
    ok: bool
    detail: str = ""


@dataclass(slots=True)
class Report:
    checks: list = field(default_factory=list)
    reproduce: str = ""
    failures: int = 0
    kv_writes_compared: int = 0
    logits_compared: int = 0
    rng_events_compared: int = 0
    tokens_compared: int = 0
    request_rounds: int = 0
    max_rel_err: dict = field(default_factory=lambda: {"kv": 0.0, "logits": 0.0})
    divergences: list = field(default_factory=list)  # excused token divergences

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)

    def first_failure(self) -> Check | None:
        return next((c for c in self.checks if not c.ok), None)

    def fail(self, name: str, detail: str) -> None:
        """Record a failure; each check keeps its first one (the first real difference)."""
        self.failures += 1
        if not any(c.name == name for c in self.checks):
            self.checks.append(
                Check(name, False, detail + (f" (reproduce: {self.reproduce})" if self.reproduce else ""))
            )

    def finish(self) -> "Report":
        failed = {c.name for c in self.checks}
        self.checks += [Check(n, True) for n in CHECKS if n not in failed]
        return self


def rel_err(a, b, floor: float = 0.0) -> float:
    """||a - b|| / max(||b||, floor) over finite entries; -inf (a masked logit) must sit at the
    same places. floor: the typical norm of such vectors, so that a vector that came out
    small by cancellation is not judged against its own small norm."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    if a.shape != b.shape:
        return float("inf")
    masked = (a == -np.inf) & (b == -np.inf)
    a, b = np.where(masked, 0.0, a), np.where(masked, 0.0, b)
    if not (np.all(np.isfinite(a)) and np.all(np.isfinite(b))):
        return float("inf")
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), floor, 1e-30))
