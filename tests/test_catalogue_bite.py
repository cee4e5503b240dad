"""The built-in mask and processor cases take their params from the model (oracle/cli/catalogue.py
derived_params): what they ban or penalise includes the reference's own top choices."""

import dataclasses

import numpy as np

from oracle.cli import catalogue
from oracle.judge.runner import REFERENCE, run_scenario


def _derived(model):
    return {c.name.split(" ")[0]: c for c in catalogue.default_cases(model.cfg.vocab_size) if c.derive is not None}


def test_bans_and_stops_are_the_references_first_choices(tiny):
    cases = _derived(tiny)
    assert set(cases) == {"banned", "logits"}
    for c in cases.values():
        plain = run_scenario(REFERENCE, tiny, dataclasses.replace(c, derive=None, derived=[]), "block").traces[0]
        params = c.params_for(tiny)
        assert c.params_for(tiny) is params  # made once per model
        for rid, p in enumerate(params):
            first = {int(np.argmax(plain.verify_logits[(rid, 0)])), int(np.argmax(plain.draft_logits[(rid, 0)]))}
            targets = (
                set(p.banned_token_ids)
                | set(p.stop_token_ids)
                | {w[0] for w in p.bad_words if len(w) == 1}
                | {t for t, b in p.logit_bias if b < 0}
            )
            if p.allowed_token_ids is not None:
                targets |= set(range(tiny.cfg.vocab_size)) - set(p.allowed_token_ids)
            if targets:  # every step but the bigram and the penalties
                assert first <= targets, (c.name, rid, first, p)
        assert any(p.repetition_penalty != 1 for p in params) or c.name.startswith("banned")


def test_a_model_too_large_for_a_plain_run_takes_the_prompts(tiny, monkeypatch):
    monkeypatch.setattr(catalogue, "PLAIN_RUN_SECONDS", -1.0)
    monkeypatch.setattr(catalogue, "tops", lambda *a: (_ for _ in ()).throw(AssertionError("ran the plain case")))
    for c in _derived(tiny).values():
        params = c.params_for(tiny)
        assert len(params) == len(c.prompts)
        for rid, p in enumerate(params):
            if len(p.banned_token_ids) == 3:
                assert p.banned_token_ids == tuple(dict.fromkeys(c.prompts[rid][::-1] + list(range(64))))[:3]
