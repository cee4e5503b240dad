"""The one Case type (a scenario the runner, oracle/judge/runner.py `run_scenario`, takes: the CLI's
cases, the shrinker's candidates and the property suite's drawn scenarios alike), `make_case` and
`command` (a case's reproduce line). Plain data: no backend, no judge, so the CLI's case catalogue
(oracle/cli/catalogue.py) and round options need not import the runner."""

from __future__ import annotations

import dataclasses
import shlex
from dataclasses import dataclass, field

import numpy as np


@dataclass(slots=True)
class Case:
    name: str
    prompts: list  # token lists
    params: list  # SamplingParams per request
    rounds: list  # per round: {rid: T_i}
    d: int
    D: int
    policy: str = "sequential"
    reproduce: str = ""
    depths: list | None = None  # (d_i, D_i) per request; None: every request (d, D)
    derive: object = None  # (model, case) -> the params run (params_for); None: params
    derived: list = field(default_factory=list, repr=False, compare=False)  # [(model, params)]: made once
    given_ops: tuple | None = None  # runner ops with leaves ("remove"), from_ops; None: the rounds'
    cfg: object = None  # a drawn case's model config (the property suite: seeded_model(cfg, weight_seed))
    weight_seed: int = 0

    @classmethod
    def from_ops(cls, cfg, weight_seed, d, D, policy, prompts, params, ops, depths=None, name="scenario") -> "Case":
        """A case given as runner ops ("add", rid) | ("step", ((rid, T_i), ...)) | ("remove", rid)
        on a model config and weight seed (the property suite's scenarios); its rounds are the
        steps'."""
        ops = tuple(ops)
        rounds = [dict(arg) for op, arg in ops if op == "step"]
        return cls(
            name, prompts, params, rounds, d, D, policy, "", depths, given_ops=ops, cfg=cfg, weight_seed=weight_seed
        )

    def with_ops(self, ops) -> "Case":
        """This case with other runner ops (and the rounds of their steps)."""
        ops = tuple(ops)
        rounds = [dict(arg) for op, arg in ops if op == "step"]
        return dataclasses.replace(self, rounds=rounds, given_ops=ops, derived=[])

    def with_policy(self, policy: str) -> "Case":
        return dataclasses.replace(self, policy=policy, derived=[])

    def describe(self) -> str:
        """The shape of a drawn case, for a failure message."""
        cfg = f" layers={self.cfg.num_layers} vocab={self.cfg.vocab_size}" if self.cfg is not None else ""
        return f"d={self.d} D={self.D} depths={self.depths} policy={self.policy}{cfg} rounds={self.rounds}"

    def params_for(self, model) -> list:
        """The SamplingParams each request runs with on `model`: `params`, or where the case
        derives them from the model (the built-in mask and processor cases: what they ban or
        penalise includes the reference's own top choices), derive(model, self), made once
        per model. A deterministic function of the model, so the reproduce line remakes it."""
        if self.derive is None:
            return self.params
        for m, params in self.derived:
            if m is model:
                return params
        params = self.derive(model, self)
        self.derived[:] = [(model, params)]
        return params

    @property
    def ops(self) -> tuple:
        """The runner ops: given_ops, else the rounds', where a request joins right before the
        first round naming it."""
        if self.given_ops is not None:
            return self.given_ops
        ops, joined = [], set()
        for counts in self.rounds:
            ops += [("add", rid) for rid in counts if rid not in joined]
            joined |= set(counts)
            ops.append(("step", tuple(counts.items())))
        return tuple(ops)


def command(words: list[str]) -> str:
    """The shell line `python -m oracle WORDS...` (a case's reproduce line)."""
    return shlex.join(["python", "-m", "oracle", *words])


def make_case(
    name,
    counts_rounds,
    d,
    D,
    params,
    seed=0,
    policy="sequential",
    prompt_len=(1, 8),
    reproduce="",
    vocab=64,
    depths=None,
) -> Case:
    """Prompts drawn from `seed` (token ids below min(vocab, 64), lengths in prompt_len);
    depths: (d_i, D_i) per request, or None for every request at (d, D)."""
    rng = np.random.default_rng(seed)
    n_req = max(max(r) for r in counts_rounds if r) + 1 if counts_rounds else 0
    prompts = [
        list(map(int, rng.integers(0, min(vocab, 64), rng.integers(prompt_len[0], prompt_len[1] + 1))))
        for _ in range(n_req)
    ]
    return Case(name, prompts, params, counts_rounds, d, D, policy, reproduce, depths)
