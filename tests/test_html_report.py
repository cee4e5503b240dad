"""oracle/cli/html_report.py: `check --report DIR`'s page of a `check --backend` verdict.

The verdicts are built by hand in the shape `check --backend NAME --json` prints, with the maps
Verdict.error_maps adds for the page (a failed precision check with its reproduce line, a failed
token check and its record, an excused divergence's record, drift estimates with one past the
threshold, precision groups per kind, depth and layer, KV and logits errors per value)."""

from __future__ import annotations

import builtins
import copy
import math
import os

import pytest

from oracle.errors import OracleError
from oracle.cli import html_errors, html_report
from oracle.judge.comparison.report import Failure, describe

REPRO = "python -m oracle check --preset tiny --seed 0 --backend meta_tests.faulty_kernels:make_fp8_k_bf16"
PREC_FAIL = (
    "K writes, depth 0, layer 0: error energy 32.59x the bfloat16 twin's (z = 92.0): about 5.5 "
    f"significant bits where bfloat16 has 8 (reproduce: {REPRO})"
)
CASE = "ragged (5,3,1) d=2 D=4"
TOKEN = Failure(
    "tokens", "final token (offset 1)", CASE, "block", 2, 3, 1, got=33, want=12, margin=0.5,
    note="reference margin 0.5", reproduce=f"{REPRO} --case '{CASE}'",
)  # fmt: skip
EXCUSED = Failure(
    "tokens", "acceptance of the draft at offset 0", "uniform (5,5,5,5) d=2 D=4, 6 rounds", "loop", 1, 2, 0,
    got=0, want=2, margin=0.00182, error=0.17, bound=10.0, excused=True,
    note="reference margin 0.00182; its decision margin 0.00231 is 0.17 noise scales of the twin <= 10; "
    "request 2 is compared up to offset 2 and not after",
)  # fmt: skip


def maps() -> list[dict]:
    """Verdict.error_maps of the failed case: a K write bug at depth 1, layer 1 (block and loop runs)."""
    kv = [[d, layer, p, (3e-3 if (d, layer) == (1, 1) else 2e-6), 1e-5 * 1.5**d] for d in range(3) for layer in range(2)
          for p in range(3, 9)]  # fmt: skip
    logits = [[c, o, 4e-5 * (o + 1), 3.4e-5] for c in ("draft_logits", "verify_logits") for o in range(4)]
    return [
        {"label": f"{CASE} [{mode}]", "case": CASE, "mode": mode, "ok": False, "kv": kv, "logits": logits,
         "tokens": [TOKEN.to_json()] if mode == "block" else []}
        for mode in ("block", "loop")
    ]  # fmt: skip


def verdict() -> dict:
    groups = [
        {
            "group": f"{kind}, depth {d}, layer {layer}",
            "kind": kind,
            "depth": d,
            "layer": layer,
            "energy": e,
            "se_log": 0.03,
            "z": z,
            "values": 392,
            "bits": 8 - 0.5 * math.log2(e),
        }
        for kind, e, z in (("K writes", 32.6, 92.0), ("V writes", 1.2, -15.0))
        for d in range(3)
        for layer in range(2)
    ]
    groups += [
        {
            "group": "draft logits, depth 1",
            "kind": "draft logits",
            "depth": 1,
            "energy": 2.7,
            "se_log": 0.04,
            "z": 5.5,
            "values": 374,
            "bits": 7.3,
        },
        {
            "group": "verification logits, depth 2",
            "kind": "verification logits",
            "depth": 2,
            "energy": 1.1,
            "se_log": 0.04,
            "z": -9.0,
            "values": 392,
            "bits": 7.9,
        },
    ]
    est = [
        {
            "parameter": "layer 0 attention logit scale (= q_proj output scale)",
            "scale": 1.0087,
            "se": 0.0005,
            "z": 13.7,
            "weights_alone": 0.9995,
            "allowance": [-0.0016, 0.0021],
        },
        {
            "parameter": "layer 0 k_proj output scale",
            "scale": 0.9990,
            "se": 0.0001,
            "z": 0.0,
            "weights_alone": 0.9991,
            "allowance": [-0.0012, 0.0012],
        },
        # far out: drawn at the axis' edge with its value
        {
            "parameter": "RoPE base (rope_theta)",
            "scale": 1.25,
            "se": 0.001,
            "z": 40.0,
            "weights_alone": 1.001,
            "allowance": [-0.002, 0.0016],
        },
    ]
    return {
        "ok": False,
        "backend": "torch-cpu-bf16 (fp8_k)",
        "dtype": "bfloat16",
        "exact": False,
        "judge": "reference",
        "tolerance_row": "bfloat16",
        "layers": 2,
        "checks": [
            {"name": "ragged (5,3,1) d=2 D=4 [block]: rounds", "ok": True, "detail": "", "failure": None},
            {"name": f"{CASE} [block]: tokens", "ok": False, "detail": describe(TOKEN), "failure": TOKEN.to_json()},
            {"name": "drift probe: drift", "ok": False, "detail": "attention logit scale 1.0087 ± 0.0005"},
            {"name": "drift probe: precision", "ok": False, "detail": PREC_FAIL},
        ],
        "cases": [
            {"name": "ragged (5,3,1) d=2 D=4", "ok": False},
            {"name": "uniform (5,5,5,5) d=2 D=4, 6 rounds", "ok": True},
        ],
        "kv_writes_compared": 8932,
        "logits_compared": 2162,
        "rng_events_compared": 965,
        "tokens_compared": 523,
        "request_rounds": 318,
        "excused_divergences": [describe(EXCUSED)],
        "excused_records": [EXCUSED.to_json()],
        "maps": maps(),
        "max_rel_err": {"kv": 0.08, "logits": 0.09},
        "skipped": [],
        "seconds": 14.8,
        "drift": {
            "ok": False,
            "requests": 24,
            "threshold": 5.89,
            "failure": "attention logit scale 1.0087 ± 0.0005",
            "family_alpha": 1e-4,
            "values": 122880,
            "seconds": 8.0,
            "invisible": ["layer 0 o_proj output scale"],
            "estimates": est,
        },
        "precision": {
            "ok": False,
            "dtype": "bfloat16",
            "requests": 24,
            "threshold": 5.58,
            "rho": 2.0,
            "family_alpha": 1e-4,
            "failure": PREC_FAIL,
            "seconds": 1.8,
            "groups": groups,
        },
    }


def test_page_holds_the_verdict_the_failures_and_the_plots(tmp_path):
    pytest.importorskip("matplotlib")
    path = html_report.write_report(verdict(), str(tmp_path / "out"))
    assert path == str(tmp_path / "out" / "index.html")
    page = open(path, encoding="utf-8").read()
    assert "FAILED: torch-cpu-bf16 (fp8_k)" in page and "bfloat16" in page and "the FP32 reference" in page
    # the failed checks come first, before the plots, each with its detail and reproduce line
    assert page.index("Failed checks") < page.index("<img")
    assert "drift probe: precision" in page and "error energy 32.59x the bfloat16 twin&#x27;s" in page
    assert f"<pre>{REPRO} --case &#x27;{CASE}&#x27;</pre>" in page  # a record's reproduce line, apart
    assert f"{CASE} [block]: tokens" in page and "backend 33 vs reference 12" in page
    assert "acceptance of the draft at offset 0: backend 0 vs reference 2" in page  # the excused one is listed
    assert "layer 0 o_proj output scale" in page  # what the probe cannot observe
    for name in ("kv", "logits", "divergences", "precision", "drift"):  # a picture per failure class
        png = tmp_path / "out" / f"{name}.png"
        assert png.exists() and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert page.count("data:image/png;base64,") == 5  # the page alone is the report


def test_a_failed_write_leaves_the_folder_as_it_was(tmp_path, monkeypatch):
    """The page and its plots are written whole or not at all: a write that fails after the plots
    are drawn leaves neither a plot nor a page of this report (an earlier report's stays as it was)."""
    pytest.importorskip("matplotlib")
    out = tmp_path / "r"
    out.mkdir()
    (out / "index.html").write_text("earlier")

    def disk_full(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(html_report, "_page", disk_full)
    with pytest.raises(OSError):
        html_report.write_report(verdict(), str(out))
    assert sorted(p.name for p in out.iterdir()) == ["index.html"] and (out / "index.html").read_text() == "earlier"


def test_passing_verdict_and_missing_sections_still_render(tmp_path):
    pytest.importorskip("matplotlib")
    v = verdict()
    v.update(ok=True, excused_divergences=[], excused_records=[], maps=[])
    v["checks"] = [c for c in v["checks"] if c["ok"]]
    for key in ("drift", "precision", "max_rel_err", "cases", "seconds"):
        del v[key]
    out = tmp_path / "r"
    out.mkdir()
    (out / "drift.png").write_bytes(b"stale")  # an earlier report's plot
    page = open(html_report.write_report(v, str(out)), encoding="utf-8").read()
    assert "OK: torch-cpu-bf16 (fp8_k)" in page
    assert "No drift report in this verdict." in page and "No precision report in this verdict." in page
    assert "No token diverged" in page and "<img" not in page
    assert "No KV write differs." in page and "No logits vector differs." in page
    assert not (out / "drift.png").exists() and not (out / "precision.png").exists()
    # a bare verdict (only the keys a Verdict always has) renders too
    bare = html_report.write_report({"ok": False, "backend": "x", "dtype": "float32"}, str(tmp_path / "bare"))
    assert "FAILED: x" in open(bare, encoding="utf-8").read()


def test_divergences_are_read_from_the_records():
    rows = html_errors.divergences(verdict())
    excused, failed = [r for r in rows if r["excused"]], [r for r in rows if not r["excused"]]
    assert [(r["round"], r["request"], r["got"], r["want"], r["margin"], r["error"]) for r in excused] == [
        (1, 2, 0, 2, 0.00182, 0.17)
    ]
    assert [(r["case"], r["mode"], r["round"], r["got"], r["want"], r["sides"]) for r in failed] == [
        (CASE, "block", 2, 33, 12, ["backend", "reference"])
    ]


def test_the_kv_picture_draws_the_comparisons_of_the_failing_case():
    pytest.importorskip("matplotlib")
    from matplotlib.figure import Figure

    v = verdict()
    assert [m["mode"] for m in html_errors.panels(v, "kv")] == ["block", "loop"]
    fig = html_errors.kv_plot(Figure, v)
    grid = fig.axes[0].images[0].get_array()  # rows (depth, layer), columns position: error / tolerance
    assert grid.shape == (6, 6) and int(grid.argmax()) // 6 == 3  # the row of depth 1, layer 1
    v["maps"] = []
    assert html_errors.kv_plot(Figure, v) is None and html_errors.logits_plot(Figure, v) is None


def test_block_and_loop_failing_alike_are_one_card():
    v = verdict()
    loop = copy.deepcopy(v["checks"][1])
    loop["name"] = loop["name"].replace("[block]", "[loop]")
    loop["failure"]["mode"] = "loop"
    loop["detail"] = "the text is not read: the record is"
    merged = html_report._merged_failures(html_report._failed({"checks": v["checks"] + [loop]}))
    assert [m["name"] for m in merged] == [
        "ragged (5,3,1) d=2 D=4 [block, loop]: tokens",
        "drift probe: drift",
        "drift probe: precision",
    ]
    assert merged[0]["detail"].startswith("round 2 request 3: final token")
    other = copy.deepcopy(loop)
    other["failure"]["case"] = "uniform"
    merged = html_report._merged_failures(html_report._failed({"checks": v["checks"] + [loop, other]}))
    assert merged[0]["name"] == "tokens: 3 checks in 2 cases [block, loop]"  # one card per class, as the text
    assert merged[0]["detail"].startswith(f"first: {CASE} [block]: round 2 request 3: final token")


def test_without_matplotlib_one_line_says_how_to_install(tmp_path, monkeypatch):
    real = builtins.__import__

    def no_matplotlib(name, *args, **kwargs):
        if name == "matplotlib" or name.startswith("matplotlib."):
            raise ImportError(f"No module named {name!r}")
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_matplotlib)
    with pytest.raises(OracleError) as e:
        html_report.write_report(verdict(), str(tmp_path / "none"))
    msg = str(e.value)
    assert "\n" not in msg and 'pip install -e ".[plots]"' in msg
    assert not os.path.exists(tmp_path / "none")  # nothing written
    with pytest.raises(OracleError, match=r"pip install -e \"\.\[plots\]\""):
        html_report.require_plots()  # the preflight says the same
