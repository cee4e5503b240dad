"""Malformed backend output is a failed check naming the place (exit 1) wherever the judge meets it
(the drift probe, the noise twin, the comparison), never an internal error (exit 3): short logits,
a K write of the wrong head size, vLLM's -1 placeholder token, logits that are not numbers."""

from __future__ import annotations

import json
import sys

import pytest

from oracle.cli import main

PLUGIN = """
import numpy as np
from examples.plugin_backend import PluginBackend, PluginSession

class S(PluginSession):
    def step(self, counts):
        tr = self.inner.step(counts)
        self.perturb(tr)
        return tr

class B(PluginBackend):
    dtype = "bfloat16"
    def __init__(self, fn):
        super().__init__(None)
        self.fn = fn
    def session(self, model, d, D, mode, policy="sequential"):
        return S(super().session(model, d, D, mode, policy).inner, self.fn)

def short(tr):
    tr.verify_logits = {k: v[:-3] for k, v in tr.verify_logits.items()}
def kvhead(tr):
    tr.kv_writes = {k: (c, np.asarray(kk)[..., :-1], vv) for k, (c, kk, vv) in tr.kv_writes.items()}
def negative(tr):
    for rid in tr.emitted:
        tr.emitted[rid] = [-1] + list(tr.emitted[rid])[1:]
def strings(tr):
    tr.verify_logits = {k: np.asarray(v).astype(str) for k, v in tr.verify_logits.items()}
make = {n: (lambda f=f: B(f)) for n, f in (("short", short), ("kvhead", kvhead), ("negative", negative),
                                          ("strings", strings))}
make_short, make_kvhead, make_negative, make_strings = (make[n] for n in ("short", "kvhead", "negative", "strings"))
"""

CASES = {
    "short": "verification logits of offset 0 have shape [61], expected [64]",
    "kvhead": "the K write at position",
    "negative": "emitted token -1 is not a token id in [0, 64)",
    "strings": "are of type <U32, not numbers",
}


@pytest.mark.parametrize("kind", sorted(CASES))
def test_malformed_output_fails_the_check_naming_it(kind, tmp_path, monkeypatch, capsys):
    pytest.importorskip("torch")
    (tmp_path / "badout_plugin.py").write_text(PLUGIN)
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("badout_plugin", None)
    rc = main(["check", "--backend", f"badout_plugin:make_{kind}", "--case", "ragged (5,3,1) d=2 D=4", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 1 and not out["ok"]
    probe = [c for c in out["checks"] if c["name"] == "drift probe: drift"]
    assert probe and not probe[0]["ok"] and CASES[kind] in probe[0]["detail"], probe
    assert "drift probe [block]: round 0 request 0" in probe[0]["detail"]
