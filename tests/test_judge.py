"""The one judge (oracle.judge.comparison.compare.compare_runs) through `python -m oracle check --backend`, in
both directions: a correct reduced-precision plug-in passes, and each wrong one fails with
exit 1 and the place named (meta_tests/plugins.py); plus the per-request rule on traces."""

import copy
import json
import subprocess
import sys

import numpy as np

from oracle.judge.comparison.compare import compare_runs
from oracle.sampling_params import SamplingParams as SP
from oracle.session import Session


def check(*args):
    # every call names a --backend; the failing ones assert the failure, not its shrunk case
    # (tests/test_shrink.py): --no-shrink spares the search's 20 s budget
    r = subprocess.run([sys.executable, "-m", "oracle", "check", *args, "--no-shrink"], capture_output=True, text=True)
    return r.returncode, r.stdout, r.stderr


def plugin(name):
    return ["--backend", f"meta_tests.plugins:make_{name}"]


def test_reference_traces_declared_bf16_pass():
    rc, out, err = check(*plugin("reference_as_bf16"))
    assert rc == 0, out + err
    assert "tolerance row 'bfloat16'" in out and "OK" in out


def test_one_kv_write_scaled_fails_and_names_it():
    rc, out, err = check(*plugin("one_kv_write_scaled"), "--json")
    assert rc == 1, out + err
    bad = [c for c in json.loads(out)["checks"] if not c["ok"]]
    assert bad and all(c["name"].endswith("kv_writes") for c in bad), bad
    # the first request of the first case, offset 0 (position = its prompt length - 1), depth 1, layer 0
    assert "round 0 request 0: KV write of offset 0 (position" in bad[0]["detail"]
    err = float(bad[0]["detail"].split("depth 1 layer 0 differs: relative error ")[1].split()[0])
    assert 0.3 < err <= 0.5, bad[0]["detail"]  # 0.5 of its norm, or less of a larger typical one
    assert "reproduce: " in bad[0]["detail"]


def test_unexplainable_traces_are_failed_checks_not_aborts():
    for name, check_name in (
        ("zero_q_draft", ""),
        ("token_out_of_vocab", "malformed"),
        ("extra_rng_event", "rng_events"),
    ):
        rc, out, err = check(*plugin(name), "--json")
        assert rc == 1, (name, rc, err)
        bad = [c for c in json.loads(out)["checks"] if not c["ok"]]
        assert bad and "request" in bad[0]["detail"], (name, bad)
        assert any(c["name"].endswith(check_name) for c in bad), (name, bad)


def one_round(model, n=6, T=4):
    rng = np.random.default_rng(0)
    s = Session(model, 2, 4, "block")
    for rid in range(n):
        s.add(rid, list(map(int, rng.integers(0, model.cfg.vocab_size, 2 + rid))), SP())
    return s.step({rid: T for rid in range(n)})


def flippable(tr, avoid):
    """A request whose final token can flip to its runner-up without changing its acceptance."""
    for rid, T in zip(tr.requests, tr.token_counts):
        a = tr.accepted[rid]
        second = int(np.argsort(tr.verify_logits[(rid, a)])[::-1][1])
        if rid != avoid and (a == T - 1 or second != tr.drafts[rid][a]):
            return rid
    raise AssertionError("no request can flip")


def excused_flip(tr, rid):
    """tr with request rid's final token flipped to its runner-up by the backend's own logits
    (an excused near-tie divergence, whatever the gap: the margin row is widened below)."""
    b = copy.deepcopy(tr)
    key = (rid, b.accepted[rid])
    lg = b.verify_logits[key].copy()
    best, second = np.argsort(lg)[::-1][:2]
    lg[best], lg[second] = lg[second], lg[best]
    b.verify_logits[key] = lg
    b.emitted[rid] = b.emitted[rid][:-1] + [int(second)]
    b.committed[rid] = list(b.emitted[rid])
    return b


def test_skipped_kv_write_of_one_request_beside_an_excused_divergence(tiny, monkeypatch):
    import oracle.tolerances as cmp

    tr = one_round(tiny)
    monkeypatch.setitem(cmp.TOLERANCES, "bfloat16", dict(cmp.TOLERANCES["bfloat16"], margin=1.0, logits=1.0))
    b = excused_flip(tr, flippable(tr, avoid=3))
    rep = compare_runs([tr], [b], "bfloat16")
    assert rep.ok and len(rep.divergences) == 1, rep.first_failure()
    start = len(tr.prefix[3]) - 1
    del b.kv_writes[(3, start + 2, 1, 0)]
    rep = compare_runs([tr], [b], "bfloat16")
    f = rep.first_failure()
    assert not rep.ok and f.name == "kv_writes", rep.checks
    assert "request 3: KV write of offset 2" in f.detail and "depth 1 layer 0 is missing" in f.detail


def test_other_requests_are_still_compared_after_one_diverges(tiny, monkeypatch):
    import oracle.tolerances as cmp

    tr = one_round(tiny)
    monkeypatch.setitem(cmp.TOLERANCES, "bfloat16", dict(cmp.TOLERANCES["bfloat16"], margin=1.0, logits=1.0))
    b = excused_flip(tr, flippable(tr, avoid=4))
    key = (4, len(tr.prefix[4]) - 1 + 3, 3, 1)
    c, k, v = b.kv_writes[key]
    b.kv_writes[key] = (c, k * np.float32(2.0), v)
    rep = compare_runs([tr], [b], "bfloat16")
    assert not rep.ok and "request 4: KV write of offset 3" in rep.first_failure().detail


def test_duplicate_kv_write_is_counted(tiny):
    tr = one_round(tiny)
    b = copy.deepcopy(tr)
    b.stats = dict(b.stats, kv_writes=b.stats["kv_writes"] + 1)
    rep = compare_runs([tr], [b], "exact")
    assert not rep.ok and "duplicate write" in rep.first_failure().detail


def two_rounds(model):
    rng = np.random.default_rng(1)
    s = Session(model, 2, 4, "block")
    for rid in range(4):
        s.add(rid, list(map(int, rng.integers(0, model.cfg.vocab_size, 3 + rid))), SP())
    return [s.step({rid: 3 for rid in range(4)}), s.step({rid: 2 for rid in range(4)})]


def without(tr, rid):
    """The round as if request rid had left the batch (finished on that side)."""
    keep = [i for i, r in enumerate(tr.requests) if r != rid]
    out = copy.deepcopy(tr)
    out.requests = [tr.requests[i] for i in keep]
    out.token_counts = [tr.token_counts[i] for i in keep]
    for name in ("kv_writes", "draft_logits", "verify_logits"):
        setattr(out, name, {k: v for k, v in getattr(tr, name).items() if k[0] != rid})
    out.rng_events = [e for e in tr.rng_events if e.request != rid]
    for name in ("drafts", "accepted", "emitted", "committed", "params"):
        getattr(out, name).pop(rid, None)
    return out


def test_rounds_pair_on_requests_still_compared(tiny, monkeypatch):
    """After a request diverged (excused), the two sides may run it in different rounds (it drew
    a stop token on one side only): the judge pairs rounds on the requests it still compares."""
    import oracle.tolerances as cmp

    monkeypatch.setitem(cmp.TOLERANCES, "bfloat16", dict(cmp.TOLERANCES["bfloat16"], margin=1.0, logits=1.0))
    ref = two_rounds(tiny)
    rid = flippable(ref[0], avoid=None)
    got = [excused_flip(ref[0], rid), copy.deepcopy(ref[1])]
    rep = compare_runs([ref[0], without(ref[1], rid)], got, "bfloat16")
    assert rep.ok and len(rep.divergences) == 1, rep.first_failure()
    other = next(r for r in ref[0].requests if r != rid)  # a request still compared
    rep = compare_runs([ref[0], without(ref[1], other)], got, "bfloat16")
    assert not rep.ok and rep.first_failure().name == "rounds", rep.checks
