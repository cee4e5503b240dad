"""Malformed backend output is a failed check naming the place (exit 1), never an internal error
(exit 3): short logits, a K write of the wrong head size, vLLM's -1 placeholder token (emitted or
drafted), logits that are not numbers. It is checked once, at the side boundary
(oracle/judge/comparison/malformed.py), before any noise twin, fit or comparison reads the run: every case's
comparison and the drift probe report `FAIL [malformed]` for a bfloat16 plug-in and a float32 one
alike, and `trace record --backend` refuses to write it."""

from __future__ import annotations

import json
import sys

import pytest

from oracle.cli import main

pytestmark = pytest.mark.time_limit(120)  # runs plug-ins: a hang fails here, not the suite (conftest.py)

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
def negative_draft(tr):
    for rid in tr.drafts:
        if tr.drafts[rid]:
            tr.drafts[rid] = [-1] + list(tr.drafts[rid])[1:]

class B32(B):
    dtype = "float32"
def strings(tr):
    tr.verify_logits = {k: np.asarray(v).astype(str) for k, v in tr.verify_logits.items()}
FNS = {"short": short, "kvhead": kvhead, "negative": negative, "negative_draft": negative_draft, "strings": strings}
for n, f in FNS.items():
    globals()["make_" + n] = lambda f=f: B(f)
    globals()["make32_" + n] = lambda f=f: B32(f)
"""

CASES = {
    "short": "verification logits of offset 0 have shape [61], expected [64]",
    "kvhead": "the K write at position",
    "negative": "emitted token at offset 0 is -1, not a token id in [0, 64)",
    "negative_draft": "draft token at offset 1 is -1, not a token id in [0, 64)",
    "strings": "are of type <U32, not numbers",
}


@pytest.mark.parametrize("kind", sorted(CASES))
@pytest.mark.parametrize("maker", ["make", "make32"])
def test_malformed_output_fails_the_check_naming_it(kind, maker, tmp_path, monkeypatch, capsys):
    pytest.importorskip("torch")
    (tmp_path / "badout_plugin.py").write_text(PLUGIN)
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("badout_plugin", None)
    case = "ragged (5,3,1) d=2 D=4"
    rc = main(
        ["check", "--backend", f"badout_plugin:{maker}_{kind}", "--case", case, "--json", "--quiet", "--no-shrink"]
    )
    out = json.loads(capsys.readouterr().out)
    assert rc == 1 and not out["ok"]
    failed = [c for c in out["checks"] if not c["ok"]]
    cases = [c for c in failed if c["name"] == f"{case} [block]: malformed"]
    assert cases and CASES[kind] in cases[0]["detail"] and "round 0 request" in cases[0]["detail"], failed
    assert {c["name"].rsplit(": ", 1)[-1] for c in failed} == {"malformed"}, failed  # nothing else judged it
    probe = [c for c in out["checks"] if c["name"] == "drift probe: malformed"]
    if maker == "make":  # bfloat16: the probe runs, and meets the malformed output first
        assert probe and CASES[kind] in probe[0]["detail"], probe
        assert "drift probe [block]: round 0 request 0" in probe[0]["detail"]
    else:
        assert not probe


def test_trace_record_refuses_a_negative_draft(tmp_path, monkeypatch, capsys):
    pytest.importorskip("torch")
    (tmp_path / "badout_plugin.py").write_text(PLUGIN)
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("badout_plugin", None)
    out_file = tmp_path / "t.json"
    argv = ["trace", "record", "--counts", "3,2", "--rounds", "1", "--backend", "badout_plugin:make_negative_draft"]
    rc = main(argv + ["--out", str(out_file)])
    out = capsys.readouterr().out
    assert rc == 1 and "FAIL [malformed] round 0 request 0: " + CASES["negative_draft"] in out, out
    assert not out_file.exists()
