"""The catalogue of invalid inputs: every one is refused before any work with exit code 2 and
one `error: ...` line on stderr (no traceback), in every subcommand and file type.

Each entry is (family, id, make) where make(files) returns the argv (and optionally a dict of
environment variables); `files` builds fixture files on demand (a tiny checkpoint, a trace).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from oracle.cli import main


class Files:
    """Builds the files a catalogue entry needs under one temp folder."""

    def __init__(self, root: Path, good_ckpt: Path, good_trace: Path):
        self.root, self.good_ckpt, self.good_trace = root, good_ckpt, good_trace

    def path(self, name: str) -> str:
        return str(self.root / name)

    def text(self, name: str, content) -> str:
        p = self.root / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(content if isinstance(content, str) else json.dumps(content))
        return str(p)

    def ckpt(self, name: str, edit=None) -> str:
        """A copy of the tiny checkpoint; edit(folder) changes it."""
        dst = self.root / name
        shutil.copytree(self.good_ckpt, dst)
        if edit:
            edit(dst)
        return str(dst)

    def tensors(self, name: str, change) -> str:
        """A checkpoint whose tensors dict went through change(dict)."""
        from safetensors.numpy import load_file, save_file

        def edit(folder):
            w = load_file(str(folder / "model.safetensors"))
            change(w)
            save_file(w, str(folder / "model.safetensors"))

        return self.ckpt(name, edit)

    def config(self, name: str, change) -> str:
        def edit(folder):
            c = json.loads((folder / "config.json").read_text())
            change(c)
            (folder / "config.json").write_text(json.dumps(c))

        return self.ckpt(name, edit)

    def trace(self, name: str, edit_json=None, npz: bytes | None = None, keep_sha: bool = False) -> str:
        """A copy of the good trace; edit_json(j) changes its JSON, npz replaces its NPZ bytes
        (with keep_sha=False the JSON records the new NPZ's sha256, so only its content is bad)."""
        j = json.loads(self.good_trace.read_text())
        data = Path(str(self.good_trace) + ".npz").read_bytes() if npz is None else npz
        if npz is not None and not keep_sha:
            j["npz"]["sha256"] = hashlib.sha256(data).hexdigest()
        if edit_json:
            edit_json(j)
        p = self.root / name
        p.write_text(json.dumps(j))
        Path(str(p) + ".npz").write_bytes(data)
        return str(p)

    def module(self, name: str, source: str) -> str:
        """A plug-in module NAME.py in the temp folder (on sys.path during the test)."""
        (self.root / f"{name}.py").write_text(source)
        return name

    def shards(self, name: str) -> str:
        """The tiny checkpoint in two shards that both hold model.norm.weight, with different values."""
        from safetensors.numpy import load_file, save_file

        def edit(folder):
            w = load_file(str(folder / "model.safetensors"))
            (folder / "model.safetensors").unlink()
            names = sorted(w)
            a, b = names[::2], names[1::2]
            norm = "model.norm.weight"
            save_file({n: w[n] for n in set(a) | {norm}}, str(folder / "model-00001-of-00002.safetensors"))
            save_file(
                {n: w[n] for n in set(b) - {norm}} | {norm: w[norm] + 1},
                str(folder / "model-00002-of-00002.safetensors"),
            )
            wmap = {n: "model-00001-of-00002.safetensors" for n in a} | {
                n: "model-00002-of-00002.safetensors" for n in b
            }
            wmap[norm] = "model-00001-of-00002.safetensors"
            (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": wmap}))

        return self.ckpt(name, edit)

    def other_trace(self, name: str, *options) -> str:
        """A trace recorded like the good one but with other options (another model or parameters)."""
        p = self.path(name)
        assert main(["trace", "record", "--counts", "2,1", "--rounds", "2", *options, "--out", p]) == 0
        return p

    def fifo(self, name: str) -> str:
        """A named pipe with no writer: reading it blocks forever."""
        p = self.root / name
        os.mkfifo(p)
        return str(p)

    def deep_json(self, name: str, depth: int = 200_000) -> str:
        return self.text(name, "[" * depth + "]" * depth)

    def trace_and_npz_from(self, name: str, npz_source: str) -> str:
        """The good trace whose NPZ is replaced by a link to npz_source (a pipe, a device)."""
        p = self.trace(name)
        Path(p + ".npz").unlink()
        os.symlink(npz_source, p + ".npz")
        return p

    def trace_without_npz(self, name: str) -> str:
        p = self.trace(name)
        Path(p + ".npz").unlink()
        return p


def _write(path: Path, data: bytes) -> None:
    path.write_bytes(data)


def _truncate(folder: Path) -> None:
    data = (folder / "model.safetensors").read_bytes()
    _write(folder / "model.safetensors", data[: len(data) // 2])


def _garbage(folder: Path) -> None:
    _write(folder / "model.safetensors", np.random.default_rng(0).bytes(4096))


def _index(content):
    def edit(folder: Path):
        (folder / "model.safetensors.index.json").write_text(
            content if isinstance(content, str) else json.dumps(content)
        )

    return edit


def _npz_rows(j):  # the JSON claims one more KV write than the NPZ holds
    j["rounds"][0]["kv_writes"].append(j["rounds"][0]["kv_writes"][0])


def _round0(**fields):
    """Edit of a trace: set per-request fields of round 0 (lists of [rid, value])."""

    def edit(j):
        j["rounds"][0].update(fields)

    return edit


def _params(**fields):
    """Edit of a trace: request 0's sampling parameters, in the file's params and every round's."""

    def edit(j):
        for rid, p in j["params"]:
            if rid == 0:
                p.update(fields)
        for r in j["rounds"]:
            for rid, p in r.get("params", []):
                if rid == 0:
                    p.update(fields)

    return edit


def _committed_not_prefix(j):
    r = j["rounds"][0]
    rid, emitted = r["emitted"][0]
    r["committed"] = [[rid, [t + 1 for t in emitted]]]


CHECK = ["check", "--rounds", "1", "--counts", "2,1"]


def _npz_in_the_way(f) -> str:
    """A trace path whose NPZ's name is taken by a folder (issue 62: checked before the work)."""
    os.makedirs(f.path("t.json.npz"))
    return f.path("t.json")


ALL_TOKENS = ",".join(map(str, range(64)))

CATALOGUE = [
    # ---- option values of check / trace record ----
    ("values", "seed -1", lambda f: ["check", "--seed", "-1"]),
    ("values", "counts empty item", lambda f: ["check", "--counts", "5,,3"]),
    # (rows of one shape: the catalogue is data, one invalid input per row, deliberately)
    ("values", "counts trailing comma", lambda f: ["check", "--counts", "5,"]),
    ("values", "counts empty", lambda f: ["check", "--counts", ""]),
    ("values", "counts zero", lambda f: ["check", "--counts", "3,0"]),
    ("values", "counts negative", lambda f: ["check", "--counts", "-1,2"]),
    ("values", "counts not integers", lambda f: ["check", "--counts", "a,b"]),
    ("values", "counts float", lambda f: ["check", "--counts", "2.5"]),
    ("values", "d zero", lambda f: ["check", "-d", "0"]),
    ("values", "d equals D", lambda f: ["check", "-d", "4", "-D", "4"]),
    ("values", "D zero", lambda f: ["check", "-D", "0"]),
    ("values", "temperature negative", lambda f: ["check", "--temperature", "-0.5"]),
    ("values", "temperature nan", lambda f: ["check", "--temperature", "nan"]),
    ("values", "temperature inf", lambda f: ["check", "--temperature", "inf"]),
    ("values", "top-k zero", lambda f: ["check", "--top-k", "0"]),
    ("values", "top-p zero", lambda f: ["check", "--top-p", "0"]),
    ("values", "top-p above one", lambda f: ["check", "--top-p", "1.5"]),
    ("values", "rounds zero", lambda f: ["check", "--rounds", "0"]),
    ("values", "policy unknown", lambda f: ["check", "--policy", "random"]),
    ("values", "prompt-len zero", lambda f: ["check", "--prompt-len", "0"]),
    ("values", "preset unknown", lambda f: ["check", "--preset", "huge"]),
    ("values", "case unknown", lambda f: ["check", "--case", "nope"]),
    ("values", "case with counts", lambda f: ["check", "--case", "ragged (5,3,1) d=2 D=4", "--counts", "2"]),
    ("values", "-d with --depths", lambda f: ["check", "--counts", "2,1", "--depths", "1:3,2:4", "-d", "1"]),
    ("values", "-D with --depths", lambda f: ["check", "--counts", "2,1", "--depths", "1:3,2:4", "-D", "4"]),
    ("values", "depths negative", lambda f: ["check", "--counts", "2,1", "--depths", "-1:4,2:4"]),
    ("values", "stop-tokens negative", lambda f: ["check", "--stop-tokens", "-3"]),
    ("values", "banned-tokens negative", lambda f: ["check", "--banned-tokens", "-3,2"]),
    ("values", "banned-tokens mask the whole vocabulary", lambda f: ["check", "--banned-tokens", ALL_TOKENS]),
    (
        "values",
        "schedule -D with --depths",
        lambda f: ["schedule", "--counts", "5,3", "--depths", "1:3,2:4", "-D", "4"],
    ),
    ("values", "record mode unknown", lambda f: ["trace", "record", "--mode", "both", "--out", f.path("t.json")]),
    ("values", "record seed -1", lambda f: ["trace", "record", "--seed", "-1", "--out", f.path("t.json")]),
    # values that cannot work: limits stated
    ("values", "repetition penalty overflowing float32", lambda f: [*CHECK, "--repetition-penalty", "1e300"]),
    ("values", "repetition penalty vanishing in float32", lambda f: [*CHECK, "--repetition-penalty", "1e-300"]),
    ("values", "one-token bad words mask every token", lambda f: [*CHECK, "--bad-words", ALL_TOKENS.replace(",", "/")]),
    (
        "values",
        "bad words and banned tokens mask every token",
        lambda f: [
            *CHECK,
            "--banned-tokens",
            ",".join(map(str, range(32))),
            "--bad-words",
            "/".join(map(str, range(32, 64))),
        ],
    ),
    ("values", "min-tokens masking every token", lambda f: [*CHECK, "--stop-tokens", ALL_TOKENS, "--min-tokens", "2"]),
    (
        "values",
        "record repetition penalty 1e300",
        lambda f: ["trace", "record", "--repetition-penalty", "1e300", "--out", f.path("t.json")],
    ),
    ("plugin", "timeout beyond the clock", lambda f: ["check", "--backend", "torch-cpu", "--timeout", "1e300"]),
    ("plugin", "timeout past 1e6 s", lambda f: ["check", "--backend", "torch-cpu", "--timeout", "2e6"]),
    (
        "plugin",
        "record timeout beyond the clock",
        lambda f: ["trace", "record", "--backend", "torch-cpu", "--timeout", "1e300", "--out", f.path("t.json")],
    ),
    # ---- options that would do nothing: refused, never dropped ----
    ("dropped", "policy fixed with temperature 0", lambda f: [*CHECK, "--policy", "fixed", "--temperature", "0"]),
    ("dropped", "top-k with temperature 0", lambda f: [*CHECK, "--top-k", "5", "--temperature", "0"]),
    ("dropped", "min-p with temperature 0", lambda f: [*CHECK, "--min-p", "0.1", "--temperature", "0"]),
    ("dropped", "top-k keeping the whole vocabulary", lambda f: [*CHECK, "--top-k", "64"]),
    ("dropped", "min-tokens without stop tokens", lambda f: [*CHECK, "--min-tokens", "2"]),
    (
        "dropped",
        "record policy fixed with temperature 0",
        lambda f: ["trace", "record", "--policy", "fixed", "--temperature", "0", "--out", f.path("t.json")],
    ),
    (
        "dropped",
        "record timeout without backend",
        lambda f: ["trace", "record", "--timeout", "5", "--out", f.path("t.json")],
    ),
    (
        "dropped",
        "record threads without backend",
        lambda f: ["trace", "record", "--threads", "1", "--out", f.path("t.json")],
    ),
    (
        "dropped",
        "record timeout with the reference backend",
        lambda f: ["trace", "record", "--backend", "reference", "--timeout", "5", "--out", f.path("t.json")],
    ),
    (
        "dropped",
        "bench rounds min-tokens",
        lambda f: ["bench", "rounds", "--device", "cpu", "--preset", "tiny", "--min-tokens", "2"],
    ),
    (
        "dropped",
        "bench sweep top-k with greedy requests",
        lambda f: ["bench", "sweep", "--device", "cpu", "--preset", "tiny", "--top-k", "5"],
    ),
    # ---- usage: commands and options ----
    ("usage", "unknown command", lambda f: ["frobnicate"]),
    ("usage", "no command", lambda f: ["--"]),
    ("usage", "'--' as an option value", lambda f: ["check", "--seed=--"]),
    ("usage", "'--' after a list option", lambda f: ["bench", "rounds", "--tokens", "--"]),
    ("usage", "unknown option", lambda f: ["check", "--bogus"]),
    ("usage", "stray positional", lambda f: ["check", "extra"]),
    ("usage", "trace without subcommand", lambda f: ["trace"]),
    ("usage", "bench without subcommand", lambda f: ["bench"]),
    ("usage", "schedule without counts", lambda f: ["schedule"]),
    ("usage", "option without value", lambda f: ["check", "--counts"]),
    ("usage", "carriage return in an argument", lambda f: ["check", "\r0"]),
    ("usage", "newline in a path", lambda f: ["check", "--checkpoint", "a\nb"]),
    ("usage", "checkpoint with preset", lambda f: ["check", "--checkpoint", str(f.good_ckpt), "--preset", "tiny"]),
    ("plugin", "empty backend name", lambda f: ["check", "--backend", ""]),
    (
        "plugin",
        "module with a syntax error",
        lambda f: ["check", "--backend", f.module("plug_syntax", "def make_backend(:\n    pass\n") + ":make_backend"],
    ),
    (
        "plugin",
        "module raising at import",
        lambda f: ["check", "--backend", f.module("plug_import", "raise RuntimeError('boom at import')\n") + ":make"],
    ),
    ("plugin", "factory missing", lambda f: ["check", "--backend", f.module("plug_empty", "") + ":make_backend"]),
    (
        "plugin",
        "factory raising (before the 1.4B model is built)",
        lambda f: [
            "check",
            "--preset",
            "ouro-1.4b",
            "--allow-large",
            "--counts",
            "1",
            "--rounds",
            "1",
            "--backend",
            f.module("plug_factory", "def make():\n    raise RuntimeError('no device')\n") + ":make",
        ],
    ),
    (
        "plugin",
        "factory calling sys.exit(0)",
        lambda f: [
            "check",
            "--backend",
            f.module("plug_exit0", "import sys\ndef make():\n    sys.exit(0)\n") + ":make",
        ],
    ),
    (
        "plugin",
        "module calling sys.exit(0) at import",
        lambda f: ["check", "--backend", f.module("plug_exit_import", "import sys\nsys.exit(0)\n") + ":make"],
    ),
    ("plugin", "--reference without --backend", lambda f: ["check", "--reference", "jax"]),
    (
        "plugin",
        "--reference with the reference backend",
        lambda f: ["check", "--backend", "reference", "--reference", "jax"],
    ),
    (
        "plugin",
        "judge of lower precision than float32",
        lambda f: ["check", "--backend", "torch-cpu", "--reference", "torch-cpu-bf16"],
    ),
    ("plugin", "timeout zero", lambda f: ["check", "--backend", "torch-cpu", "--timeout", "0"]),
    ("plugin", "threads zero", lambda f: ["check", "--backend", "torch-cpu", "--threads", "0"]),
    (
        "plugin",
        "record with a backend that cannot load",
        lambda f: ["trace", "record", "--backend", "nomodule:make", "--out", f.path("t.json")],
    ),
    ("environment", "ORACLE_BACKEND ignored by check", lambda f: (CHECK, {"ORACLE_BACKEND": "torch-cpu"})),
    ("environment", "LOOPSPEC_GEMV not 0/1", lambda f: (["bench", "c-table"], {"LOOPSPEC_GEMV": "yes"})),
    (
        "environment",
        "LOOPSPEC_COMPILE_DYNAMIC unknown",
        lambda f: (["bench", "rounds"], {"LOOPSPEC_COMPILE_DYNAMIC": "some"}),
    ),
    ("environment", "LOOPSPEC_PDL not 0/1", lambda f: (["check", "--backend", "torch-cpu"], {"LOOPSPEC_PDL": "on"})),
    (
        "environment",
        "LOOPSPEC_PROGRAM_NORM_ROWS not 0..16",
        lambda f: (["check", "--backend", "torch-cpu"], {"LOOPSPEC_PROGRAM_NORM_ROWS": "-1"}),
    ),
    (
        "environment",
        "LOOPSPEC_ATTN_EARLY_ROWS 17",
        lambda f: (["check", "--backend", "torch-cpu"], {"LOOPSPEC_ATTN_EARLY_ROWS": "17"}),
    ),
    (
        "environment",
        "LOOPSPEC_INVARIANT not 0/1",
        lambda f: (["check", "--backend", "torch-cpu"], {"LOOPSPEC_INVARIANT": "yes"}),
    ),
    (
        "environment",
        "invariance fault without the invariant mode",
        lambda f: (["check", "--backend", "torch-cpu-bf16"], {"LOOPSPEC_FAULT": "inv_splitk"}),
    ),
    (
        "environment",
        "LOOPSPEC_PDL_TRIGGER unknown",
        lambda f: (["check", "--backend", "torch-cpu"], {"LOOPSPEC_PDL_TRIGGER": "early"}),
    ),
    (
        "environment",
        "LOOPSPEC_GEMV_CONFIG prefetch negative",
        lambda f: (
            ["bench", "c-table"],
            {"LOOPSPEC_GEMV_CONFIG": f.text("gp.json", {"o/16": [16, 256, 2, 4, 1, 2, -8]})},
        ),
    ),
    (
        "environment",
        "LOOPSPEC_GEMV_MAX_ROWS above 16",
        lambda f: (["check", "--backend", "torch-cpu"], {"LOOPSPEC_GEMV_MAX_ROWS": "17"}),
    ),
    (
        "environment",
        "LOOPSPEC_GEMV_CONFIG missing",
        lambda f: (["check", "--backend", "torch-cpu"], {"LOOPSPEC_GEMV_CONFIG": f.path("none.json")}),
    ),
    (
        "environment",
        "LOOPSPEC_GEMV_CONFIG tiles not integers",
        lambda f: (
            ["check", "--backend", "torch-cpu"],
            {"LOOPSPEC_GEMV_CONFIG": f.text("gs.json", {"one_row": [64, "x", 4]})},
        ),
    ),
    (
        "environment",
        "LOOPSPEC_GEMV_CONFIG tiles floats",
        lambda f: (["bench", "c-table"], {"LOOPSPEC_GEMV_CONFIG": f.text("gf.json", {"one_row": [64.0, 128, 4]})}),
    ),
    (
        "environment",
        "LOOPSPEC_GEMV_CONFIG tile zero",
        lambda f: (["bench", "c-table"], {"LOOPSPEC_GEMV_CONFIG": f.text("gz.json", {"one_row": [0, 128, 4]})}),
    ),
    (
        "environment",
        "LOOPSPEC_GEMV_CONFIG unknown kernel",
        lambda f: (
            ["bench", "c-table"],
            {"LOOPSPEC_GEMV_CONFIG": f.text("gk.json", {"qkv/8": [32, 256, 4, 3, 1, 2]})},
        ),
    ),
    (
        "environment",
        "LOOPSPEC_GEMV_CONFIG split-K zero",
        lambda f: (["bench", "c-table"], {"LOOPSPEC_GEMV_CONFIG": f.text("g0.json", {"o/16": [16, 256, 2, 4, 1, 0]})}),
    ),
    (
        "environment",
        "LOOPSPEC_GEMV_CONFIG not JSON",
        lambda f: (["bench", "sweep"], {"LOOPSPEC_GEMV_CONFIG": f.text("g.json", "{")}),
    ),
    # ---- limits instead of hangs ----
    ("limits", "check one huge count", lambda f: ["check", "--counts", "100000"]),
    ("limits", "check too many requests", lambda f: ["check", "--counts", ",".join(["1"] * 1000)]),
    ("limits", "check D 1000", lambda f: ["check", "-D", "1000", "--rounds", "1"]),
    ("limits", "check prompt-len 100000", lambda f: ["check", "--prompt-len", "100000", "--rounds", "1"]),
    ("limits", "check rounds 100000", lambda f: ["check", "--rounds", "100000"]),
    ("limits", "check estimated time", lambda f: ["check", "--counts", "200,200,200", "--rounds", "200"]),
    ("limits", "schedule huge count", lambda f: ["schedule", "--counts", "100000"]),
    ("limits", "schedule diagram too big", lambda f: ["schedule", "--counts", ",".join(["100"] * 100)]),
    ("limits", "cost D 1000", lambda f: ["cost", "-D", "1000"]),
    ("limits", "cost batch a billion", lambda f: ["cost", "--batch", "1000000000"]),
    ("limits", "cost ragged huge count", lambda f: ["cost", "--counts", "1,100000"]),
    ("limits", "model too many tokens", lambda f: ["model", "--preset", "tiny", "--tokens", ",".join(["1"] * 5000)]),
    ("limits", "model estimated time", lambda f: ["model", "--preset", "ouro-1.4b", "--tokens", ",".join(["1"] * 200)]),
    ("limits", "model loops 1000", lambda f: ["model", "--preset", "tiny", "--tokens", "1", "--loops", "1000"]),
    ("limits", "bench rows too large", lambda f: ["bench", "c-table", "--device", "cpu", "--rows", "100000"]),
    # ---- checkpoint folders and files ----
    ("checkpoint", "missing folder", lambda f: ["check", "--checkpoint", f.path("nowhere"), "--rounds", "1"]),
    ("checkpoint", "a file, not a folder", lambda f: ["check", "--checkpoint", f.text("afile", "x"), "--rounds", "1"]),
    (
        "checkpoint",
        "no config.json",
        lambda f: ["check", "--checkpoint", f.ckpt("nc", lambda d: (d / "config.json").unlink())],
    ),
    (
        "checkpoint",
        "config not JSON",
        lambda f: ["check", "--checkpoint", f.ckpt("cj", lambda d: (d / "config.json").write_text("{oops"))],
    ),
    (
        "checkpoint",
        "config a list",
        lambda f: ["check", "--checkpoint", f.ckpt("cl", lambda d: (d / "config.json").write_text("[1]"))],
    ),
    (
        "checkpoint",
        "config missing key",
        lambda f: ["check", "--checkpoint", f.config("ck", lambda c: c.pop("hidden_size"))],
    ),
    (
        "checkpoint",
        "config zero heads",
        lambda f: ["check", "--checkpoint", f.config("ch", lambda c: c.update(num_attention_heads=0))],
    ),
    (
        "checkpoint",
        "config string size",
        lambda f: ["check", "--checkpoint", f.config("cs", lambda c: c.update(vocab_size="64"))],
    ),
    (
        "checkpoint",
        "config tied embeddings",
        lambda f: ["check", "--checkpoint", f.config("ct", lambda c: c.update(tie_word_embeddings=True))],
    ),
    (
        "checkpoint",
        "no weights file",
        lambda f: ["check", "--checkpoint", f.ckpt("nw", lambda d: (d / "model.safetensors").unlink())],
    ),
    (
        "checkpoint",
        "truncated safetensors",
        lambda f: ["check", "--checkpoint", f.ckpt("tr", _truncate), "--rounds", "1"],
    ),
    ("checkpoint", "garbage safetensors", lambda f: ["model", "--checkpoint", f.ckpt("gb", _garbage), "--tokens", "1"]),
    ("checkpoint", "index not JSON", lambda f: ["check", "--checkpoint", f.ckpt("ij", _index("{bad"))]),
    ("checkpoint", "index a list", lambda f: ["check", "--checkpoint", f.ckpt("il", _index([]))]),
    (
        "checkpoint",
        "index without weight_map",
        lambda f: ["check", "--checkpoint", f.ckpt("iw", _index({"metadata": {}}))],
    ),
    (
        "checkpoint",
        "index names a missing shard",
        lambda f: [
            "check",
            "--checkpoint",
            f.ckpt("im", _index({"weight_map": {"lm_head.weight": "gone.safetensors"}})),
        ],
    ),
    (
        "checkpoint",
        "index path outside folder",
        lambda f: [
            "check",
            "--checkpoint",
            f.ckpt("io", _index({"weight_map": {"lm_head.weight": "../x.safetensors"}})),
        ],
    ),
    (
        "checkpoint",
        "int64 tensors",
        lambda f: [
            "model",
            "--checkpoint",
            f.tensors("i64", lambda w: w.update({k: v.astype(np.int64) for k, v in w.items()})),
            "--tokens",
            "1",
        ],
    ),
    (
        "checkpoint",
        "missing tensor",
        lambda f: ["model", "--checkpoint", f.tensors("mt", lambda w: w.pop("lm_head.weight")), "--tokens", "1"],
    ),
    (
        "checkpoint",
        "misshaped tensor",
        lambda f: [
            "model",
            "--checkpoint",
            f.tensors("ms", lambda w: w.update({"model.norm.weight": np.ones(3, np.float32)})),
            "--tokens",
            "1",
        ],
    ),
    (
        "checkpoint",
        "NaN tensor",
        lambda f: [
            "model",
            "--checkpoint",
            f.tensors("nan", lambda w: w["model.norm.weight"].__setitem__(0, np.nan)),
            "--tokens",
            "1",
        ],
    ),
    (
        "checkpoint",
        "a tensor in two shards with different values",
        lambda f: ["model", "--checkpoint", f.shards("dup"), "--tokens", "1"],
    ),
    # ---- model command ----
    ("model", "loops zero", lambda f: ["model", "--preset", "tiny", "--tokens", "1,2", "--loops", "0"]),
    (
        "model",
        "save onto an existing file",
        lambda f: ["model", "--preset", "tiny", "--tokens", "1", "--save", f.text("exists", "x")],
    ),
    (
        "model",
        "save onto a checkpoint",
        lambda f: ["model", "--preset", "tiny", "--tokens", "1", "--save", str(f.good_ckpt)],
    ),
    (
        "model",
        "save into a missing folder",
        lambda f: ["model", "--preset", "tiny", "--tokens", "1", "--save", f.path("a/b/c")],
    ),
    (
        "model",
        "save with checkpoint",
        lambda f: ["model", "--checkpoint", str(f.good_ckpt), "--tokens", "1", "--save", f.path("s")],
    ),
    ("model", "neither preset nor checkpoint", lambda f: ["model", "--tokens", "1"]),
    (
        "model",
        "both preset and checkpoint",
        lambda f: ["model", "--preset", "tiny", "--checkpoint", str(f.good_ckpt), "--tokens", "1"],
    ),
    ("model", "token outside vocabulary", lambda f: ["model", "--preset", "tiny", "--tokens", "1,999"]),
    ("model", "negative token", lambda f: ["model", "--preset", "tiny", "--tokens", "-1"]),
    ("model", "tokens empty item", lambda f: ["model", "--preset", "tiny", "--tokens", "1,,2"]),
    # ---- trace files ----
    ("trace", "diff missing file", lambda f: ["trace", "diff", f.path("none.json"), str(f.good_trace)]),
    ("trace", "diff a directory", lambda f: ["trace", "diff", str(f.root), str(f.good_trace)]),
    ("trace", "diff not JSON", lambda f: ["trace", "diff", f.text("bad.json", "{x"), str(f.good_trace)]),
    ("trace", "diff JSON list", lambda f: ["trace", "diff", f.text("list.json", []), str(f.good_trace)]),
    (
        "trace",
        "diff no rounds",
        lambda f: ["trace", "diff", f.trace("nr.json", lambda j: j.pop("rounds")), str(f.good_trace)],
    ),
    (
        "trace",
        "diff zero rounds",
        lambda f: [
            "trace",
            "diff",
            f.trace("z1.json", lambda j: j.update(rounds=[])),
            f.trace("z2.json", lambda j: j.update(rounds=[])),
        ],
    ),
    (
        "trace",
        "diff old format",
        lambda f: [
            "trace",
            "diff",
            f.trace("v1.json", lambda j: j.update(format="loopspec-trace/1")),
            str(f.good_trace),
        ],
    ),
    (
        "trace",
        "diff no sha256",
        lambda f: ["trace", "diff", f.trace("ns.json", lambda j: j.pop("npz")), str(f.good_trace)],
    ),
    ("trace", "diff missing NPZ", lambda f: ["trace", "diff", str(f.good_trace), f.trace_without_npz("mn.json")]),
    (
        "trace",
        "diff another trace's NPZ",
        lambda f: [
            "trace",
            "diff",
            str(f.good_trace),
            f.trace("other.json", npz=np.random.default_rng(1).bytes(64), keep_sha=True),
        ],
    ),
    ("trace", "diff garbage NPZ", lambda f: ["trace", "diff", str(f.good_trace), f.trace("gn.json", npz=b"not a zip")]),
    (
        "trace",
        "diff round missing key",
        lambda f: ["trace", "diff", str(f.good_trace), f.trace("rk.json", lambda j: j["rounds"][0].pop("kv_writes"))],
    ),
    (
        "trace",
        "diff round wrong type",
        lambda f: ["trace", "diff", str(f.good_trace), f.trace("rt.json", lambda j: j["rounds"][0].update(calls="x"))],
    ),
    (
        "trace",
        "diff round not an object",
        lambda f: ["trace", "diff", str(f.good_trace), f.trace("ro.json", lambda j: j.update(rounds=[1]))],
    ),
    (
        "trace",
        "diff NPZ rows differ from JSON",
        lambda f: ["trace", "diff", str(f.good_trace), f.trace("rows.json", _npz_rows)],
    ),
    (
        "trace",
        "diff unknown tolerance",
        lambda f: ["trace", "diff", str(f.good_trace), str(f.good_trace), "--tolerance", "int8"],
    ),
    (
        "trace",
        "diff depths d = D",
        lambda f: ["trace", "diff", str(f.good_trace), f.trace("d33.json", _round0(depths=[[0, [3, 3]]]))],
    ),
    (
        "trace",
        "diff depths negative",
        lambda f: ["trace", "diff", str(f.good_trace), f.trace("dn.json", _round0(depths=[[0, [-1, 4]]]))],
    ),
    (
        "trace",
        "diff file against itself with bad depths",
        lambda f: ["trace", "diff", *[f.trace("self.json", _round0(depths=[[0, [3, 3]]]))] * 2],
    ),
    (
        "trace",
        "diff an extra request",
        lambda f: [
            "trace",
            "diff",
            str(f.good_trace),
            f.trace("xr.json", _round0(emitted=[[0, [1]], [1, [2]], [9, [3]]])),
        ],
    ),
    (
        "trace",
        "diff committed not a prefix of emitted",
        lambda f: ["trace", "diff", str(f.good_trace), f.trace("cp.json", _committed_not_prefix)],
    ),
    (
        "trace",
        "diff unknown finish reason",
        lambda f: ["trace", "diff", str(f.good_trace), f.trace("fr.json", _round0(finished=[[0, "exploded"]]))],
    ),
    (
        "trace",
        "diff no meta",
        lambda f: ["trace", "diff", str(f.good_trace), f.trace("nm.json", lambda j: j.pop("meta"))],
    ),
    (
        "trace",
        "diff recorded tolerance row unknown",
        lambda f: [
            "trace",
            "diff",
            str(f.good_trace),
            f.trace("tr.json", lambda j: j["meta"].update(tolerance_row="int4")),
        ],
    ),
    (
        "trace",
        "diff another schema version",
        lambda f: ["trace", "diff", str(f.good_trace), f.trace("s2.json", lambda j: j.update(schema_version=2))],
    ),
    (
        "trace",
        "diff schema version a string",
        lambda f: ["trace", "diff", str(f.good_trace), f.trace("s3.json", lambda j: j.update(schema_version="3"))],
    ),
    (
        "trace",
        "diff no schema version",
        lambda f: ["trace", "diff", f.trace("s0.json", lambda j: j.pop("schema_version")), str(f.good_trace)],
    ),
    (
        "trace",
        "diff no model",
        lambda f: ["trace", "diff", str(f.good_trace), f.trace("nmo.json", lambda j: j.pop("model"))],
    ),
    (
        "trace",
        "diff model config not a config",
        lambda f: [
            "trace",
            "diff",
            str(f.good_trace),
            f.trace("mc.json", lambda j: j["model"]["config"].update(hidden_size=0)),
        ],
    ),
    (
        "trace",
        "diff no params",
        lambda f: ["trace", "diff", str(f.good_trace), f.trace("np.json", lambda j: j.pop("params"))],
    ),
    (
        "trace",
        "diff another preset",
        lambda f: ["trace", "diff", str(f.good_trace), f.other_trace("small.json", "--preset", "small")],
    ),
    (
        "trace",
        "diff another seed",
        lambda f: ["trace", "diff", str(f.good_trace), f.other_trace("seed1.json", "--seed", "1")],
    ),
    (
        "trace",
        "diff another temperature",
        lambda f: ["trace", "diff", str(f.good_trace), f.other_trace("t05.json", "--temperature", "0.5")],
    ),
    (
        "trace",
        "diff logit bias outside the vocabulary",
        lambda f: ["trace", "diff", *[f.trace("lb.json", _params(logit_bias=[[99, 1.0]]))] * 2],
    ),
    (
        "trace",
        "diff bad word outside the vocabulary",
        lambda f: ["trace", "diff", str(f.good_trace), f.trace("bw.json", _params(bad_words=[[3, 640]]))],
    ),
    (
        "trace",
        "diff bias out of range",
        lambda f: ["trace", "diff", str(f.good_trace), f.trace("lb2.json", _params(logit_bias=[[5, 1e9]]))],
    ),
    (
        "trace",
        "diff repetition penalty overflowing float32",
        lambda f: ["trace", "diff", str(f.good_trace), f.trace("rp.json", _params(repetition_penalty=1e300))],
    ),
    (
        "trace",
        "diff unknown sampling parameter",
        lambda f: ["trace", "diff", str(f.good_trace), f.trace("up.json", _params(heat=2))],
    ),
    ("trace", "record out is a directory", lambda f: ["trace", "record", "--rounds", "1", "--out", str(f.root)]),
    (
        "trace",
        "record out in a missing folder",
        lambda f: ["trace", "record", "--rounds", "1", "--out", f.path("no/dir/t.json")],
    ),
    ("trace", "record without out", lambda f: ["trace", "record", "--rounds", "1"]),
    # ---- cost and c-tables ----
    ("cost", "k negative", lambda f: ["cost", "--k", "-1"]),
    ("cost", "-d with --depths", lambda f: ["cost", "--counts", "5,3", "--depths", "1:3,2:4", "-d", "1"]),
    (
        "cost",
        "--gpu with --ctable",
        lambda f: ["cost", "--gpu", "h200", "--ctable", f.text("g.json", {"c_ms": {"1": 1}})],
    ),
    (
        "cost",
        "ctable marked noisy by the bench",
        lambda f: [
            "cost",
            "--batch",
            "1",
            "--ctable",
            f.text("nz.json", {"c_ms": {"1": 1, "2": 1.1, "5": 1.2}, "noisy": "spread 0.4"}),
        ],
    ),
    (
        "cost",
        "ctable c(M) drops by more than 25%",
        lambda f: ["cost", "--batch", "1", "--ctable", f.text("dr.json", {"c_ms": {"1": 1, "2": 144, "5": 1.2}})],
    ),
    ("cost", "batch zero", lambda f: ["cost", "--batch", "0"]),
    ("cost", "batch empty item", lambda f: ["cost", "--batch", "4,,8"]),
    ("cost", "counts with k", lambda f: ["cost", "--counts", "3", "--k", "2"]),
    ("cost", "ctable missing", lambda f: ["cost", "--ctable", f.path("none.json")]),
    ("cost", "ctable a directory", lambda f: ["cost", "--ctable", str(f.root)]),
    ("cost", "ctable not JSON", lambda f: ["cost", "--ctable", f.text("ct.json", "{")]),
    ("cost", "ctable without c_ms", lambda f: ["cost", "--ctable", f.text("ct2.json", {"ms": {}})]),
    ("cost", "ctable negative ms", lambda f: ["cost", "--ctable", f.text("ct3.json", {"c_ms": {"1": -1}})]),
    ("cost", "ctable row not integer", lambda f: ["cost", "--ctable", f.text("ct4.json", {"c_ms": {"x": 1}})]),
    (
        "cost",
        "ctable shared at one row per plane",
        lambda f: ["cost", "--ctable", f.text("ct5.json", {"c_ms": {"1": 1}, "c_ms_shared": {"1": {"1": 1}}})],
    ),
    (
        "cost",
        "ctable shared M not a multiple",
        lambda f: ["cost", "--ctable", f.text("ct6.json", {"c_ms": {"1": 1}, "c_ms_shared": {"5": {"7": 1}}})],
    ),
    (
        "cost",
        "ctable shared not an object",
        lambda f: ["cost", "--ctable", f.text("ct7.json", {"c_ms": {"1": 1}, "c_ms_shared": [1]})],
    ),
    (
        "cost",
        "ctable shared misses the rounds' rows per plane",  # K=4: 5 rows per plane, table up to 2
        lambda f: [
            "cost",
            "--batch",
            "1",
            "--ctable",
            f.text("ct8.json", {"c_ms": {"1": 1, "2": 1.1, "5": 2}, "c_ms_shared": {"2": {"2": 1}}}),
        ],
    ),
    # ---- bench (checked before torch does any work) ----
    ("bench", "device tpu", lambda f: ["bench", "c-table", "--device", "tpu"]),
    ("bench", "device cuda:x", lambda f: ["bench", "rounds", "--device", "cuda:x"]),
    ("bench", "c-table repeats zero", lambda f: ["bench", "c-table", "--repeats", "0"]),
    ("bench", "c-table rows zero", lambda f: ["bench", "c-table", "--device", "cpu", "--rows", "0,4"]),
    ("bench", "c-table out a directory", lambda f: ["bench", "c-table", "--device", "cpu", "--out", str(f.root)]),
    ("bench", "context zero", lambda f: ["bench", "c-table", "--context", "0"]),
    (
        "bench",
        "c-table rows per plane divides no row count",
        lambda f: ["bench", "c-table", "--device", "cpu", "--preset", "tiny", "--rows", "3", "--rows-per-plane", "2"],
    ),
    (
        "bench",
        "c-table rows per plane zero",
        lambda f: ["bench", "c-table", "--device", "cpu", "--preset", "tiny", "--rows", "3", "--rows-per-plane", "0"],
    ),
    (
        "bench",
        "c-table kv capacity below the context",
        lambda f: ["bench", "c-table", "--device", "cpu", "--preset", "tiny", "--context", "16", "--kv-capacity", "16"],
    ),
    (
        "bench",
        "c-table kv capacity past the limit",
        lambda f: ["bench", "c-table", "--device", "cpu", "--preset", "tiny", "--kv-capacity", "10000000"],
    ),
    ("bench", "preset unknown", lambda f: ["bench", "c-table", "--device", "cpu", "--preset", "ouro-70b"]),
    ("bench", "rounds repeats one", lambda f: ["bench", "rounds", "--repeats", "1"]),
    ("bench", "rounds batch zero", lambda f: ["bench", "rounds", "--device", "cpu", "--batch", "0"]),
    ("bench", "rounds in-flight zero", lambda f: ["bench", "rounds", "--in-flight", "0"]),
    ("bench", "rounds d equals D", lambda f: ["bench", "rounds", "--device", "cpu", "-d", "3", "-D", "3"]),
    ("bench", "sweep top-p zero", lambda f: ["bench", "sweep", "--top-p", "0"]),
    # ---- issue 45: files read, values inside files, thread counts, report folders ----
    ("trace", "diff JSON nested 200000 deep", lambda f: ["trace", "diff", f.deep_json("deep.json"), str(f.good_trace)]),
    ("cost", "ctable JSON nested 200000 deep", lambda f: ["cost", "--ctable", f.deep_json("deep.json")]),
    (
        "checkpoint",
        "config.json nested 200000 deep",
        lambda f: [*CHECK, "--checkpoint", f.ckpt("cdeep", lambda d: f.deep_json(str(d / "config.json")))],
    ),
    (
        "checkpoint",
        "index nested 200000 deep",
        lambda f: [
            *CHECK,
            "--checkpoint",
            f.ckpt("ideep", lambda d: f.deep_json(str(d / "model.safetensors.index.json"))),
        ],
    ),
    (
        "trace",
        "diff request seed -5 (with itself)",
        lambda f: ["trace", "diff", *[f.trace("s5.json", _params(seed=-5))] * 2],
    ),
    ("trace", "diff request seed 1.5", lambda f: ["trace", "diff", *[f.trace("s15.json", _params(seed=1.5))] * 2]),
    ("trace", "diff round number -1", lambda f: ["trace", "diff", *[f.trace("rn.json", _round0(round=-1))] * 2]),
    ("trace", "diff rounds out of order", lambda f: ["trace", "diff", *[f.trace("ro.json", _rounds_reversed)] * 2]),
    ("trace", "diff policy unknown", lambda f: ["trace", "diff", *[f.trace("po.json", _round0(policy="lucky"))] * 2]),
    ("trace", "diff dtype unknown", lambda f: ["trace", "diff", *[f.trace("dt.json", _round0(dtype="float99"))] * 2]),
    ("trace", "diff request id -1", lambda f: ["trace", "diff", *[f.trace("ri.json", _negative_request)] * 2]),
    ("trace", "diff RNG value 2.0", lambda f: ["trace", "diff", *[f.trace("rv.json", _event(value=2.0))] * 2]),
    ("trace", "diff RNG purpose unknown", lambda f: ["trace", "diff", *[f.trace("rp.json", _event(purpose="x"))] * 2]),
    ("trace", "diff RNG event of round 9", lambda f: ["trace", "diff", *[f.trace("rr.json", _event(round=9))] * 2]),
    (
        "trace",
        "diff call row of request 9",
        lambda f: ["trace", "diff", *[f.trace("cr.json", _call_row([9, 0, 0]))] * 2],
    ),
    ("trace", "diff call row at depth 9", lambda f: ["trace", "diff", *[f.trace("cd.json", _call_row([0, 0, 9]))] * 2]),
    ("trace", "diff prefix token -3", lambda f: ["trace", "diff", *[f.trace("pt.json", _prefix(-3))] * 2]),
    ("trace", "diff prefix token 999", lambda f: ["trace", "diff", *[f.trace("pv.json", _prefix(999))] * 2]),
    ("environment", "OMP_NUM_THREADS not a count", lambda f: (["schedule", "--counts", "2"], {"OMP_NUM_THREADS": "x"})),
    (
        "environment",
        "OMP_NUM_THREADS above the cores",
        lambda f: (["schedule", "--counts", "2"], {"OMP_NUM_THREADS": "100000"}),
    ),
    ("usage", "report a file", lambda f: [*CHECK, "--backend", PLUGIN, "--report", f.text("page", "x")]),
    ("usage", "report under a file", lambda f: [*CHECK, "--backend", PLUGIN, "--report", f.text("pg", "x") + "/sub"]),
    ("usage", "report under /proc", lambda f: [*CHECK, "--backend", PLUGIN, "--report", "/proc/oracle-report"]),
    ("usage", "report empty", lambda f: [*CHECK, "--backend", PLUGIN, "--report", ""]),
    ("model", "neither tokens nor save", lambda f: ["model", "--preset", "tiny"]),
    (
        "model",
        "save with loops but no tokens",
        lambda f: ["model", "--preset", "tiny", "--save", f.path("s"), "--loops", "2"],
    ),
    ("bench", "rounds min-tokens (not an option of bench)", lambda f: ["bench", "rounds", "--min-tokens", "2"]),
    # ---- issue 62: output paths checked before the work, values whose float32 leaves range, keys not modelled ----
    (
        "usage",
        "trace cut over its input",
        lambda f: ["trace", "cut", f.trace("in.json"), "--round", "0", "--out", f.path("in.json")],
    ),
    (
        "usage",
        "trace cut over its input's NPZ",
        lambda f: ["trace", "cut", f.trace("in2.json"), "--round", "0", "--out", f.path("in2.json.npz")],
    ),
    (
        "usage",
        "trace cut out under /proc",
        lambda f: ["trace", "cut", str(f.good_trace), "--round", "0", "--out", "/proc/x.json"],
    ),
    ("usage", "trace record out /dev/full", lambda f: ["trace", "record", "--counts", "2", "--out", "/dev/full"]),
    (
        "usage",
        "trace record NPZ a folder",
        lambda f: ["trace", "record", "--out", _npz_in_the_way(f)],
    ),
    ("usage", "bench c-table out under /proc", lambda f: ["bench", "c-table", "--out", "/proc/ct.json"]),
    ("usage", "bench sweep out under /proc", lambda f: ["bench", "sweep", "--out", "/proc/s.json"]),
    ("model", "save under /proc", lambda f: ["model", "--preset", "tiny", "--save", "/proc/ckpt"]),
    ("values", "temperature 1e-38 (scaled logits overflow float32)", lambda f: [*CHECK, "--temperature", "1e-38"]),
    ("values", "temperature 1e308 (scaled logits vanish)", lambda f: [*CHECK, "--temperature", "1e308"]),
    (
        "values",
        "temperature 1e-38 with a backend",
        lambda f: [*CHECK, "--temperature", "1e-38", "--backend", "torch-cpu"],
    ),
    (
        "checkpoint",
        "rope_scaling set",
        lambda f: [
            *CHECK,
            "--checkpoint",
            f.config("rs", lambda c: c.update(rope_scaling={"type": "linear", "factor": 2.0})),
        ],
    ),
    (
        "checkpoint",
        "use_sliding_window true",
        lambda f: [*CHECK, "--checkpoint", f.config("sw", lambda c: c.update(use_sliding_window=True))],
    ),
    (
        "checkpoint",
        "sliding layer_types",
        lambda f: [
            *CHECK,
            "--checkpoint",
            f.config("lt", lambda c: c.update(layer_types=["full_attention", "sliding_attention"])),
        ],
    ),
]

PLUGIN = "examples.plugin_backend:make_backend"


def _rounds_reversed(j):
    j["rounds"].reverse()


def _negative_request(j):
    r = j["rounds"][1]
    old = r["requests"][0]
    r["requests"][0] = -1
    for key in ("prefix", "drafts", "accepted", "emitted", "committed", "generated", "finished", "params", "depths"):
        r[key] = [[-1 if rid == old else rid, v] for rid, v in r.get(key, [])]


def _event(**fields):
    def edit(j):
        next(r for r in j["rounds"] if r["rng_events"])["rng_events"][0].update(fields)

    return edit


def _call_row(row):
    def edit(j):
        j["rounds"][0]["calls"][0]["rows"][0] = row

    return edit


def _prefix(token):
    def edit(j):
        rid, toks = j["rounds"][0]["prefix"][0]
        j["rounds"][0]["prefix"][0] = [rid, [token] + toks[1:]]

    return edit


@pytest.fixture(scope="module")
def fixtures(tmp_path_factory):
    from oracle.checkpoint import save_checkpoint
    from oracle.checkpoint import build_model

    root = tmp_path_factory.mktemp("good")
    m = build_model("tiny", 0)
    ckpt = save_checkpoint(root / "ckpt", m.cfg, m.weights)
    trace = root / "good.json"
    assert main(["trace", "record", "--counts", "2,1", "--rounds", "2", "--out", str(trace)]) == 0
    return ckpt, trace


def run_main(argv, env, capsys, monkeypatch):
    monkeypatch.delenv("ORACLE_BACKEND", raising=False)
    for k, v in (env or {}).items():
        monkeypatch.setenv(k, v)
    capsys.readouterr()
    rc = main(argv)
    out, err = capsys.readouterr()
    return rc, out, err


@pytest.mark.parametrize("family,name,make", CATALOGUE, ids=[f"{f}-{n}" for f, n, _ in CATALOGUE])
def test_invalid_input_is_refused_in_one_line(family, name, make, fixtures, tmp_path, capsys, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))  # plug-in modules written by Files.module
    made = make(Files(tmp_path, *fixtures))
    argv, env = made if isinstance(made, tuple) else (made, None)
    rc, out, err = run_main(argv, env, capsys, monkeypatch)
    lines = err.strip().splitlines()
    assert rc == 2, (rc, err)
    assert "Traceback" not in err
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert out == ""


def test_catalogue_size_and_families():
    assert len(CATALOGUE) >= 70
    assert len({(f, n) for f, n, _ in CATALOGUE}) == len(CATALOGUE)
    assert {f for f, _, _ in CATALOGUE} == {
        "values",
        "usage",
        "environment",
        "limits",
        "checkpoint",
        "model",
        "trace",
        "cost",
        "bench",
        "plugin",
        "dropped",
    }


# ---- accepted, with a warning on stderr ----


def test_decreasing_ctable_is_used_with_a_warning(tmp_path, capsys, monkeypatch):
    table = tmp_path / "dip.json"
    table.write_text(
        json.dumps({"c_ms": {str(m): 1.0 + 0.01 * m - (0.2 if m == 16 else 0) for m in (1, 2, 4, 8, 16, 20, 32)}})
    )
    rc, out, err = run_main(["cost", "--ctable", str(table), "--batch", "1,4"], None, capsys, monkeypatch)
    assert rc == 0 and "c(16)" in err and err.startswith("warning: ") and "ratio" in out


def test_D_beyond_trained_loops_is_warned(capsys, monkeypatch):
    rc, out, err = run_main(["check", "-D", "5", "--rounds", "1", "--counts", "2"], None, capsys, monkeypatch)
    assert rc == 0 and err.startswith("warning: -D 5 is beyond the 4 loops")


def test_unknown_checkpoint_tensor_is_named(fixtures, tmp_path, capsys, monkeypatch):
    f = Files(tmp_path, *fixtures)
    ck = f.tensors(
        "extra",
        lambda w: w.update(
            {"model.mystery.weight": np.ones(2, np.float32), "model.rotary_emb.inv_freq": np.ones(2, np.float32)}
        ),
    )
    rc, out, err = run_main(["model", "--checkpoint", ck, "--tokens", "1,2"], None, capsys, monkeypatch)
    assert rc == 0 and "model.mystery.weight" in err and "inv_freq" not in err


def test_internal_error_is_one_line_with_a_saved_traceback(capsys, monkeypatch):
    import oracle.cli.cmd_schedule as cs

    def broken(args):
        raise RuntimeError("planner exploded")

    monkeypatch.setattr(cs, "run", broken)
    rc, out, err = run_main(["schedule", "--counts", "2"], None, capsys, monkeypatch)
    lines = err.strip().splitlines()
    assert rc == 3 and len(lines) == 1 and "RuntimeError: planner exploded" in lines[0]
    saved = Path(lines[0].rsplit("traceback saved to ", 1)[1].rstrip(")"))
    assert "Traceback" in saved.read_text() and "planner exploded" in saved.read_text()
    saved.unlink()


def test_bench_rounds_D_beyond_trained_loops_is_warned(capsys, monkeypatch):
    import bench.cli as cb

    monkeypatch.setattr(cb, "cmd_rounds", lambda args: 0)  # the warning comes before any work
    rc, out, err = run_main(
        ["bench", "rounds", "--device", "cpu", "--preset", "tiny", "-D", "6"], None, capsys, monkeypatch
    )
    assert rc == 0 and err.startswith("warning: -D 6 is beyond the 4 loops tiny was trained with")


def _fake_ctable(spread):
    def measure(preset, rows, context, **kw):
        return {
            "c_ms": {str(M): 1.0 + M for M in rows},
            "spread": {str(M): spread for M in rows},
            "path": {str(M): "torch" for M in rows},
            "device": "cpu",
        }

    return measure


def test_bench_ctable_beyond_the_noise_bound_is_refused_unless_forced(tmp_path, capsys, monkeypatch):
    import bench.calls as kb

    out_file = tmp_path / "ct.json"
    argv = [
        "bench",
        "c-table",
        "--device",
        "cpu",
        "--preset",
        "tiny",
        "--rows",
        "1,2",
        "--quiet",
        "--out",
        str(out_file),
    ]
    monkeypatch.setattr(kb, "measure_c_table", _fake_ctable(0.4))
    rc, out, err = run_main(argv, None, capsys, monkeypatch)
    assert rc == 2 and err.startswith("error: bench c-table: the repeats spread beyond the noise bound")
    assert len(err.strip().splitlines()) == 1 and not out_file.exists()
    rc, out, err = run_main(argv + ["--force"], None, capsys, monkeypatch)
    table = json.loads(out_file.read_text())
    assert rc == 0 and table["noisy"].startswith("(q3-q1)/median 0.40 at M=1")
    assert table["threads"] >= 1 and table["threads_from"] in (
        "option",
        "free cores",
        "OMP_NUM_THREADS",
        "hidden size 32 < 512",
    )
    rc, _, err = run_main(["cost", "--ctable", str(out_file), "--k", "0", "--batch", "1"], None, capsys, monkeypatch)
    assert rc == 2 and "marked it noisy" in err
    printed = [a for a in argv if a not in ("--out", str(out_file))]  # the README's try: printed, flagged
    rc, out, err = run_main(printed, None, capsys, monkeypatch)
    assert rc == 0 and json.loads(out)["noisy"].startswith("(q3-q1)/median 0.40 at M=1")
    assert err.startswith("warning: bench c-table: the repeats spread beyond the noise bound")
    monkeypatch.setattr(kb, "measure_c_table", _fake_ctable(0.05))
    rc, out, err = run_main(argv + ["--threads", "1"], None, capsys, monkeypatch)
    table = json.loads(out_file.read_text())
    assert rc == 0 and "noisy" not in table and (table["threads"], table["threads_from"]) == (1, "option")


def test_threads_come_from_the_option_or_the_free_cores(monkeypatch):
    from oracle.cli import environment

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    assert environment.choose_threads(3) == (3, "option")
    monkeypatch.setattr(environment.os, "getloadavg", lambda: (1.4, 0.0, 0.0))
    monkeypatch.setattr(environment.os, "sched_getaffinity", lambda pid: {0, 1})
    assert environment.choose_threads(None) == (1, "free cores")  # 2 cores, load 1.4
    monkeypatch.setattr(environment.os, "getloadavg", lambda: (5.0, 0.0, 0.0))
    assert environment.free_cores() == 1  # never below one
    assert environment.choose_threads(None, {"OMP_NUM_THREADS": "2"}) == (2, "OMP_NUM_THREADS")
    monkeypatch.setattr(environment.os, "getloadavg", lambda: (0.0, 0.0, 0.0))
    assert environment.choose_threads(None, {}, hidden=2048) == (2, "free cores")
    assert environment.choose_threads(None, {}, hidden=32) == (1, "hidden size 32 < 512")  # threads only cost
    assert environment.choose_threads(4, {}, hidden=32) == (4, "option")


def test_check_limits_blas_threads_too():
    from threadpoolctl import threadpool_info
    from oracle.cli import environment

    class Args:
        threads = 1

    for n in (2, 1):
        Args.threads = n
        assert environment.set_threads(Args(), hidden=32) == {"threads": n, "threads_from": "option"}
        blas = [p["num_threads"] for p in threadpool_info() if p["user_api"] == "blas"]
        assert blas and all(t == n for t in blas), blas


# ---- trace files know their model, schema and sampling parameters ----


@pytest.mark.parametrize(
    "options,field,a,b",
    [
        (["--preset", "small"], "model.preset", "'tiny'", "'small'"),
        (["--seed", "1"], "model.seed", "0", "1"),
        (["--temperature", "0.5"], "params of request 0: temperature", "0.0", "0.5"),
    ],
)
def test_trace_diff_refuses_another_model_or_parameters_naming_the_field(
    options, field, a, b, fixtures, tmp_path, capsys, monkeypatch
):
    f = Files(tmp_path, *fixtures)
    other = f.other_trace("other.json", *options)
    for left, right, va, vb in ((str(f.good_trace), other, a, b), (other, str(f.good_trace), b, a)):
        rc, out, err = run_main(["trace", "diff", left, right], None, capsys, monkeypatch)
        lines = err.strip().splitlines()
        assert rc == 2 and out == "" and len(lines) == 1, (rc, out, err)
        assert f"{field} differs: {va} in {left}, {vb} in {right}" in lines[0], lines[0]


def test_trace_diff_names_the_schema_version(fixtures, tmp_path, capsys, monkeypatch):
    f = Files(tmp_path, *fixtures)
    for version, words in (
        (2, "schema_version 2 is not supported (this oracle reads schema_version 3"),
        ("3", "schema_version '3' is not an integer"),
    ):
        rc, _, err = run_main(
            [
                "trace",
                "diff",
                str(f.good_trace),
                f.trace(f"v{version}.json", lambda j: j.update(schema_version=version)),
            ],
            None,
            capsys,
            monkeypatch,
        )
        assert rc == 2 and words in err, err


def test_a_preset_and_its_saved_checkpoint_are_one_model(fixtures, tmp_path, capsys, monkeypatch):
    """Identity is the weights' content: the tiny preset (seed 0) and the checkpoint saved from it diff."""
    ckpt, good = fixtures
    rec = str(tmp_path / "ck.json")
    rc, _, _ = run_main(
        ["trace", "record", "--checkpoint", str(ckpt), "--counts", "2,1", "--rounds", "2", "--out", rec],
        None,
        capsys,
        monkeypatch,
    )
    assert rc == 0 and json.loads(Path(rec).read_text())["model"]["checkpoint"] == str(Path(ckpt).resolve())
    rc, out, err = run_main(["trace", "diff", str(good), rec], None, capsys, monkeypatch)
    assert rc == 0 and out.strip().endswith("identical"), (out, err)


def test_trace_diff_never_says_ok_for_a_comparison_it_did_not_make(fixtures, tmp_path, capsys, monkeypatch):
    """Token counts that differ stop the comparison at round 0: nothing of the values is compared."""
    f = Files(tmp_path, *fixtures)
    other = f.other_trace("c31.json", "--counts", "3,1")  # two requests, same params; other counts
    rc, out, err = run_main(["trace", "diff", str(f.good_trace), other], None, capsys, monkeypatch)
    assert rc == 1, (out, err)
    for name in ("kv_writes", "draft_logits", "verify_logits", "rng_events", "tokens"):
        assert f"--   {name}: not compared" in out and f"ok   {name}" not in out, out
    rc, out, _ = run_main(["trace", "diff", str(f.good_trace), other, "--json"], None, capsys, monkeypatch)
    checks = {c["name"]: c for c in json.loads(out)["checks"]}
    assert checks["kv_writes"]["compared"] is False and checks["rounds"]["ok"] is False


# ---- trace record --backend judges what it records ----

NAN_PLUGIN = """
import numpy as np
from oracle.reference_backend import ReferenceBackend

class Session:
    def __init__(self, inner):
        self.inner = inner
    def add(self, rid, prompt, params, replay=None, depths=None):
        self.inner.add(rid, prompt, params, replay=replay, depths=depths)
    def step(self, counts):
        tr = self.inner.step(counts)
        key = sorted(tr.verify_logits)[0]
        lg = np.array(tr.verify_logits[key], copy=True)
        lg[3] = np.nan
        tr.verify_logits[key] = lg
        return tr
    def remove(self, rid):
        return self.inner.remove(rid)
    def tokens(self, rid):
        return self.inner.tokens(rid)

class Backend:
    name, dtype, exact, policies, host_rng = "nan-logits", "float32", False, ("sequential", "fixed"), True
    def session(self, model, d, D, mode, policy="sequential"):
        return Session(ReferenceBackend().session(model, d, D, mode, policy))

def make():
    return Backend()
"""


@pytest.mark.parametrize(
    "spec,words",
    [
        ("plug_nan:make", "verification logits of offset 0 hold NaN"),
        ("meta_tests.plugins:make_token_out_of_vocab", "is 64, not a token id in [0, 64)"),
    ],
)
def test_record_of_malformed_rounds_fails_and_writes_only_when_asked(spec, words, tmp_path, capsys, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "plug_nan.py").write_text(NAN_PLUGIN)
    out_file = tmp_path / "m.json"
    argv = ["trace", "record", "--counts", "2,1", "--rounds", "1", "--backend", spec, "--out", str(out_file)]
    rc, out, err = run_main(argv, None, capsys, monkeypatch)
    assert rc == 1 and "FAIL [malformed] round 0 request" in out and words in out, (out, err)
    assert "nothing written" in out and not out_file.exists() and not Path(str(out_file) + ".npz").exists()
    rc, out, err = run_main(argv + ["--keep-malformed"], None, capsys, monkeypatch)
    assert rc == 1 and out_file.exists() and "malformed request-round(s) kept" in out
    meta = json.loads(out_file.read_text())["meta"]
    assert any(words in m for m in meta["malformed"]) and "--keep-malformed" in meta["reproduce"]


# ---- check's own options: refused where they would do nothing (oracle/cli/option_rules.py) ----

CHECK_RULES = [
    (["--no-drift"], "--no-drift"),
    (["--timeout", "5"], "--timeout 5"),
    (["--backend", "reference", "--timeout", "5"], "--timeout 5"),
    (["--threads", "2"], "--threads 2"),
    (["--list-cases", "--backend", "torch-cpu"], "--backend would be ignored"),
    (["--list-cases", "--counts", "2,1"], "--counts would be ignored"),
    (["--list-cases", "--case", "x"], "--case would be ignored"),
    (["--list-cases", "--json"], "--json would be ignored"),
    (["--list-cases", "--no-drift"], "--no-drift would be ignored"),
]


@pytest.mark.parametrize("argv,words", CHECK_RULES, ids=[" ".join(a) for a, _ in CHECK_RULES])
def test_check_options_that_would_do_nothing_are_refused(argv, words):
    from oracle.cli import build_parser
    from oracle.cli.option_rules import check_option_rules
    from oracle.errors import OracleError

    args = build_parser(["check"]).parse_args(["check", *argv])
    with pytest.raises(OracleError) as e:
        check_option_rules(args)
    assert words in str(e.value) and "\n" not in str(e.value)


def test_check_options_that_do_something_pass_the_rules():
    from oracle.cli import build_parser
    from oracle.cli.option_rules import DEFAULT_TIMEOUT, check_option_rules

    for argv in (["--list-cases"], ["--backend", "torch-cpu", "--no-drift", "--timeout", "5", "--threads", "1"], []):
        args = build_parser(["check"]).parse_args(["check", *argv])
        check_option_rules(args)
        assert args.timeout == (5.0 if "--timeout" in argv else DEFAULT_TIMEOUT)


def test_no_drift_with_a_float32_or_exact_backend_is_refused():
    from types import SimpleNamespace as NS
    from oracle.cli.option_rules import refuse_ineffective
    from oracle.errors import OracleError

    for bk in (NS(name="fp32", exact=False, dtype="float32"), NS(name="ex", exact=True, dtype="bfloat16")):
        with pytest.raises(OracleError, match="--no-drift: backend"):
            refuse_ineffective(NS(drift=False), bk)
    refuse_ineffective(NS(drift=False), NS(name="bf", exact=False, dtype="bfloat16"))  # it skips the verdict
    refuse_ineffective(NS(drift=True), NS(name="fp32", exact=False, dtype="float32"))


def test_timeout_limit_is_what_threading_accepts():
    import threading
    from oracle.cli.argtypes import MAX_SECONDS, positive_seconds

    assert MAX_SECONDS <= threading.TIMEOUT_MAX and positive_seconds(str(MAX_SECONDS)) == MAX_SECONDS
    threading.Event().wait(min(MAX_SECONDS, 1e-3))
    with pytest.raises(Exception, match="beyond the longest timeout"):
        positive_seconds("1e300")


# ---- lines that mislead ----


def test_cost_k_beyond_the_limit_names_k(capsys, monkeypatch):
    rc, out, err = run_main(["cost", "--k", "100000"], None, capsys, monkeypatch)
    assert (
        rc == 2
        and err.startswith("error: --k: drafts per request K 100000 exceeds the limit 255")
        and "--counts" not in err
    )


def test_cost_help_names_the_shipped_head_table(capsys, monkeypatch):
    rc, out, _ = run_main(["cost", "--help"], None, capsys, monkeypatch)
    text = " ".join(out.split())
    assert rc == 0 and "default: the shipped head table of --gpu when no --ctable is given" in text


# ---- inputs that hung or filled memory (issue 45): the CLI in a child process under a time limit
# (and an address-space limit where a regression would read without end), so a regression fails
# the test instead of hanging CI ----

REPO = Path(__file__).resolve().parents[1]
GiB = 1 << 30


def _fifo_config(f):
    def edit(folder):
        (folder / "config.json").unlink()
        os.mkfifo(folder / "config.json")

    return f.ckpt("cfifo", edit)


def _zero_shard(f):
    def edit(folder):
        (folder / "model.safetensors").unlink()
        os.symlink("/dev/zero", folder / "model.safetensors")

    return f.ckpt("czero", edit)


def _sparse(f, name, size):
    p = Path(f.path(name))
    with open(p, "wb") as out:
        out.truncate(size)  # a hole: no disk used
    return str(p)


# id, make(files) -> argv or (argv, env), words in the one error line
HANGS = [
    ("trace diff B a named pipe", lambda f: ["trace", "diff", str(f.good_trace), f.fifo("p.json")], "is a named pipe"),
    ("cost ctable a named pipe", lambda f: ["cost", "--ctable", f.fifo("p.json")], "is a named pipe, not a regular"),
    ("checkpoint config.json a named pipe", lambda f: [*CHECK, "--checkpoint", _fifo_config(f)], "is a named pipe"),
    (
        "trace NPZ a named pipe",
        lambda f: ["trace", "diff", f.trace_and_npz_from("n.json", f.fifo("np")), str(f.good_trace)],
        "is a named pipe",
    ),
    ("trace diff /dev/zero", lambda f: ["trace", "diff", "/dev/zero", str(f.good_trace)], "is a character device"),
    ("cost ctable /dev/zero", lambda f: ["cost", "--ctable", "/dev/zero"], "is a character device, not a regular"),
    ("safetensors a link to /dev/zero", lambda f: [*CHECK, "--checkpoint", _zero_shard(f)], "is a character device"),
    (
        "trace of 3.2 GB",
        lambda f: ["trace", "diff", _sparse(f, "big.json", 3_200_000_000), str(f.good_trace)],
        "is 3.2 GB, over the 1 GiB limit for a trace",
    ),
    (
        "OMP_NUM_THREADS=100000 with a torch backend",
        lambda f: ([*CHECK, "--backend", "torch-cpu"], {"OMP_NUM_THREADS": "100000"}),
        "OMP_NUM_THREADS=100000: more threads than the",
    ),
    ("--threads 100000", lambda f: [*CHECK, "--backend", "torch-cpu", "--threads", "100000"], "--threads 100000: more"),
]


def _limit_memory():
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (4 * GiB, 4 * GiB))


@pytest.mark.parametrize("make,words", [h[1:] for h in HANGS], ids=[h[0] for h in HANGS])
def test_input_that_hung_is_refused_at_once(make, words, fixtures, tmp_path):
    made = make(Files(tmp_path, *fixtures))
    argv, extra = made if isinstance(made, tuple) else (made, {})
    env = {k: v for k, v in os.environ.items() if k not in ("ORACLE_BACKEND", "OMP_NUM_THREADS")}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")])
    torch = "torch-cpu" in argv  # torch maps more address space than the limit allows
    run = subprocess.run(
        [sys.executable, "-m", "oracle", *argv],
        env=env | extra,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        preexec_fn=None if torch else _limit_memory,
    )
    lines = run.stderr.strip().splitlines()
    assert run.returncode == 2 and run.stdout == "", (run.returncode, run.stdout, run.stderr)
    assert len(lines) == 1 and lines[0].startswith("error: ") and words in lines[0], run.stderr


def test_json_nesting_is_counted_outside_strings():
    from oracle.files import json_depth

    assert json_depth(b'{"a": [1, {"b": "[[[[ ]]"}], "c\\"[": [[]]}') == 3
    assert json_depth(b"[" * 600 + b"]" * 600) == 600
    assert json_depth(b'"just a string"') == 0


# ---- --report: checked before the run, says where the page went, never loses the verdict ----


def test_report_says_where_the_page_went(tmp_path, capsys, monkeypatch):
    page = tmp_path / "new" / "folder"
    rc, out, err = run_main([*CHECK, "--backend", PLUGIN, "--report", str(page), "--quiet"], None, capsys, monkeypatch)
    assert rc == 0 and out.strip().splitlines()[-1] == f"report: {page / 'index.html'}", (out, err)
    assert (page / "index.html").is_file()


@pytest.mark.parametrize("spec,rc_want", [(PLUGIN, 2), ("examples.plugin_backend:make_faulty_backend", 1)])
def test_a_page_not_written_keeps_the_verdict_and_its_exit_code(spec, rc_want, tmp_path, capsys, monkeypatch):
    from oracle.cli import cmd_check

    def disk_full(v, directory):
        raise OSError(28, "No space left on device", str(Path(directory) / "index.html"))

    monkeypatch.setattr(cmd_check, "write_report", disk_full)
    argv = [*CHECK, "--backend", spec, "--report", str(tmp_path / "r"), "--quiet"]
    rc, out, err = run_main(argv, None, capsys, monkeypatch)
    assert rc == rc_want, (rc, out, err)
    assert ("OK in" in out) == (rc_want == 2) and ("FAILED in" in out) == (rc_want == 1)  # the verdict, printed
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: --report {tmp_path / 'r'}: the page was not written")
    assert "No space left on device" in lines[0]


def test_report_without_matplotlib_stops_before_the_run(tmp_path, capsys, monkeypatch):
    for name in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib raises ImportError
    page = tmp_path / "r"
    rc, out, err = run_main([*CHECK, "--backend", PLUGIN, "--report", str(page)], None, capsys, monkeypatch)
    assert rc == 2 and out == "" and not page.exists(), (rc, out, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "matplotlib" in lines[0] and lines[0].startswith("error: ")


# ---- names printed safely; reproduce lines that run from any folder; trace diff's A and B ----

EVIL = """
from examples.plugin_backend import PluginBackend


def make():
    b = PluginBackend(None)
    b.name = "evil\\n\\x1b[31mRED"
    return b
"""


def test_a_backend_name_with_control_characters_is_printed_escaped(tmp_path, capsys, monkeypatch):
    (tmp_path / "evil_plugin.py").write_text(EVIL)
    monkeypatch.syspath_prepend(str(tmp_path))
    rc, out, err = run_main([*CHECK, "--backend", "evil_plugin:make", "--quiet"], None, capsys, monkeypatch)
    assert rc == 0 and "\x1b" not in out + err, (out, err)
    assert out.splitlines()[0].startswith("loopspec-oracle check: backend evil\\n\\x1b[31mRED (float32")
    rc, out, err = run_main(["check", "--backend", "x\n\x1b[31m"], None, capsys, monkeypatch)
    assert rc == 2 and "\x1b" not in err and len(err.strip().splitlines()) == 1


def test_a_plugin_found_through_the_current_folder_reproduces_from_any_folder(capsys, monkeypatch):
    monkeypatch.chdir(REPO)
    argv = [*CHECK, "--backend", "examples.plugin_backend:make_faulty_backend", "--quiet"]
    rc, out, err = run_main(argv, None, capsys, monkeypatch)
    line = out.split("(reproduce: ", 1)[1].split(")\n", 1)[0]
    assert rc == 1 and line.startswith(f"PYTHONPATH={REPO} python -m oracle check "), line


def test_trace_diff_names_its_files_a_and_b(fixtures, tmp_path, capsys, monkeypatch):
    b = tmp_path / "b.json"
    argv = ["trace", "record", "--counts", "2,1", "--rounds", "2", "--out", str(b)]
    rc, out, err = run_main(
        [*argv, "--backend", "examples.plugin_backend:make_faulty_backend"], None, capsys, monkeypatch
    )
    assert rc == 0 and "recorded 2 rounds" in out, (out, err)
    rc, out, err = run_main(["trace", "diff", str(fixtures[1]), str(b)], None, capsys, monkeypatch)
    assert rc == 1 and out.startswith(f"B {b} judged against A {fixtures[1]}"), out
    assert "largest difference at index 17: B " in out and " vs A " in out and "backend" not in out, out


def test_model_save_needs_no_tokens(tmp_path, capsys, monkeypatch):
    rc, out, err = run_main(["model", "--preset", "tiny", "--save", str(tmp_path / "ck")], None, capsys, monkeypatch)
    assert rc == 0 and out == f"saved checkpoint to {tmp_path / 'ck'}\n" and (tmp_path / "ck" / "config.json").is_file()
