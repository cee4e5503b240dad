"""KernelOptions: which device fast paths the torch backend takes (docs/DESIGN.md section 9).

Passed explicitly: TorchBackend(..., kernel_options=) -> TorchSession -> Engine ->
PackedModel. Nothing reads the environment at import; `KernelOptions.from_env()` turns the
LOOPSPEC_* variables into options and is called only at the edges a person starts: the
registry factories make_torch_cpu / make_torch_cpu_bf16 / make_torch_cuda (`--backend NAME`,
ORACLE_BACKEND) and the `oracle bench` entry points (bench/calls.py, bench/rounds.py).

Fields (None: on where available; True: on, False: off) and their variables:
    gemv             calls of up to gemv_max_rows rows through kernels/gemv.py; CUDA+Triton LOOPSPEC_GEMV
    fuse             torch.compile of the norm/RoPE/SiLU blocks; None: on CUDA only;
                     True also compiles on the CPU                                          LOOPSPEC_FUSE
    triton_attn      split-KV decode attention (kernels/triton_attention.py); CUDA+Triton  LOOPSPEC_TRITON_ATTN
    compile_dynamic  "rows" | "all": what torch.compile treats as symbolic (with fuse)      LOOPSPEC_COMPILE_DYNAMIC
    gemv_config      GEMV tile overrides                                                    LOOPSPEC_GEMV_CONFIG
                     {kernel: (BLOCK_N, BLOCK_K, num_warps[, stages[, peel[, split[,        (a JSON file)
                     prefetch]]]])}, kernel one of GEMV_KEYS (qkv, o, gate_up, down; "/16"
                     for 2..16 rows)
    gemv_max_rows    calls of 1..gemv_max_rows rows take the GEMV path (2..16: the small-M  LOOPSPEC_GEMV_MAX_ROWS
                     tensor-core path of kernels/gemv.py); larger calls cuBLAS + compiled blocks
    pdl              programmatic dependent launch of the GEMV-path kernels (each starts while its
                     predecessor drains, streams its first weight tile, then waits for the
                     predecessor's writes); available on CUDA devices of compute capability >= 9   LOOPSPEC_PDL
    attn_early_rows  calls of up to this many rows (0..16) load the attention chunks     LOOPSPEC_ATTN_EARLY_ROWS
                     below every key the call writes on a row's plane before the PDL wait
                     (kernels/triton_attention.py); default 2, measured (ATTN_EARLY_ROWS)
    program_norm_rows calls of up to this many rows (0..16) norm the input of qkv and     LOOPSPEC_PROGRAM_NORM_ROWS
                     gate_up in every program; larger calls in one `_prenorm_kernel` launch
                     each; default 1, measured (PROGRAM_NORM_ROWS)
    pdl_trigger      "wait": a kernel lets its successor launch after its own PDL wait; "start":  LOOPSPEC_PDL_TRIGGER
                     before it (so a launch may run two kernels ahead; each still waits for its
                     predecessor's writes); "late": the four products after their K loop, the
                     other kernels after their wait
    fault            a deliberate fault (FAULTS below; "" none), so the judge can be shown to catch it   LOOPSPEC_FAULT
    invariant        False (default) | True: every recurrent call and head on the batch-invariant   LOOPSPEC_INVARIANT
                     primitives of kernels/invariant.py (a row's bits do not depend on the other
                     rows of its call nor on the thread count; the backend declares batch_invariant);
                     the fast paths above are then not taken
A switch variable "1" (or unset) leaves the field None, "0" sets it False; LOOPSPEC_INVARIANT "1"
sets invariant True, "0" or unset leaves it False.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field

from oracle.errors import OracleError
from oracle.files import read_json

COMPILE_DYNAMIC = ("rows", "all")
PDL_TRIGGERS = ("wait", "start", "late")
PDL_MODES = {"wait": 1, "start": 2, "late": 3}  # the kernels' PDL constexpr (kernels/gemv_blocks.py pdl_enter)
ENV = {
    "gemv": "LOOPSPEC_GEMV",
    "fuse": "LOOPSPEC_FUSE",
    "triton_attn": "LOOPSPEC_TRITON_ATTN",
    "compile_dynamic": "LOOPSPEC_COMPILE_DYNAMIC",
    "gemv_config": "LOOPSPEC_GEMV_CONFIG",
    "gemv_max_rows": "LOOPSPEC_GEMV_MAX_ROWS",
    "pdl": "LOOPSPEC_PDL",
    "pdl_trigger": "LOOPSPEC_PDL_TRIGGER",
    "attn_early_rows": "LOOPSPEC_ATTN_EARLY_ROWS",
    "program_norm_rows": "LOOPSPEC_PROGRAM_NORM_ROWS",
    "fault": "LOOPSPEC_FAULT",
    "invariant": "LOOPSPEC_INVARIANT",
}
# Deliberate kernel faults, for the judge's own tests (meta_tests/faulty_kernels.py, make gpu-parity):
# "attn_scale=F" multiplies the softmax logit scale in the attention kernels, "rope_theta=F" the
# RoPE base of the cos/sin tables, "input_layernorm.L=F" layer L's input norm weight. Precision
# faults (no factor): "fp8_k" / "fp8_v" store K / V in the cache through FP8 e4m3, "fp8_act" rounds
# the MLP activation (SiLU(gate) * up) through FP8 before down_proj, "fp8_gate_up.L" stores layer L's
# gate/up weights through FP8: a quantized path switched on by mistake, for the precision verdict.
FAULTS = ("attn_scale", "rope_theta", "input_layernorm")
PRECISION_FAULTS = ("fp8_k", "fp8_v", "fp8_act", "fp8_gate_up")
# Coarser-rounding faults ("NAME[.L]=B": B significant bits, fractional B a grid that is no power of
# two, kernels/model.py round_bits), in force on every path (eager, fused, GEMV): "k_bits=B" /
# "v_bits=B" store K / V with B bits (every layer, or layer L), "attn_out_bits.L=B" rounds layer L's
# attention output (o_proj's input), "o_weight_bits.L=B" stores layer L's o_proj weights with B bits.
# The kernel band faults of meta_tests/band_faults.py (issue 46): error energies 1.5-1.9x the twin's.
BITS_FAULTS = ("k_bits", "v_bits", "attn_out_bits", "o_weight_bits")
BITS_LAYER_REQUIRED = ("attn_out_bits", "o_weight_bits")
# Batch-invariance faults (kernels/invariant_faults.py), only with invariant=True: in calls of more
# than 2 rows "inv_splitk" splits o_proj's K in two halves with bfloat16 partials, "inv_attn_split"
# splits each row's keys in two chunks combined by a running max/sum (split-KV decode), and
# "inv_norm_block" sums post_attention_layernorm's squares in blocks of hidden/4 stored in bfloat16.
# A row's bits then depend on its call's row count: the exactness tier must catch each and the
# localizer name its operation (meta_tests/faulty_kernels.py INVARIANT_OPS).
INVARIANT_FAULTS = ("inv_splitk", "inv_attn_split", "inv_norm_block")
# The handover between the GEMV paths and cuBLAS, chosen by measurement on the H200: the
# small-M path beat cuBLAS + compiled blocks at M = 2, 4, 8 and 16 by 18-23% (docs/results.md, "Kernels
# at the ouro-1.4b shape").
GEMV_MAX_ROWS = 16
# Attention's older keys loaded before the PDL wait, in calls of up to this many rows: paired on the
# H200 at ouro-1.4b, c(1) 3.2-4.8% less, c(2) 0.2-1.0% less, c(4..16) 4-10% more (docs/results.md, 2026-12-04).
ATTN_EARLY_ROWS = 2
# Calls of up to this many rows norm qkv's and gate_up's input in every program (each recomputes its
# rows' statistics), larger ones in one _prenorm_kernel launch each: one row in one launch took
# 0.7-1.6% more, 2..16 rows in every program 2.5-2.8x (H200, ouro-1.4b; docs/results.md, 2026-12-04).
PROGRAM_NORM_ROWS = 1
# the GEMV paths' products: a tile config's keys are these (one row) and name + "/16" (2..16 rows)
GEMV_KERNELS = ("qkv", "o", "gate_up", "down")
GEMV_KEYS = (*GEMV_KERNELS, *(f"{k}/16" for k in GEMV_KERNELS))
# The variables' values (checked by check_env before any work: from_env, bench's preflight).
SWITCHES = tuple(ENV[n] for n in ("gemv", "fuse", "triton_attn", "pdl", "invariant"))  # "0" or "1"
CHOICES = {
    ENV["compile_dynamic"]: COMPILE_DYNAMIC,
    ENV["gemv_max_rows"]: tuple(str(m) for m in range(1, 17)),
    ENV["pdl_trigger"]: PDL_TRIGGERS,
    ENV["attn_early_rows"]: tuple(str(m) for m in range(0, 17)),
    ENV["program_norm_rows"]: tuple(str(m) for m in range(0, 17)),
}


def check_env(env=os.environ) -> None:
    """The LOOPSPEC_* variables: each malformed one refused in one line (OracleError)."""
    for name in SWITCHES:
        value = env.get(name)
        if value is not None and value not in ("0", "1"):
            raise OracleError(f"{name}={value!r}: expected 0 or 1")
    for name, choices in CHOICES.items():
        value = env.get(name)
        if value is not None and value not in choices:
            raise OracleError(f"{name}={value!r}: expected one of {', '.join(choices)}")
    path = env.get("LOOPSPEC_GEMV_CONFIG")
    if path:
        data = read_json(path, "LOOPSPEC_GEMV_CONFIG=", "gemv config")
        form = "[BLOCK_N, BLOCK_K, num_warps(, num_stages(, peel(, split(, prefetch))))]"
        if not isinstance(data, dict) or not all(isinstance(v, list) and 3 <= len(v) <= 7 for v in data.values()):
            raise OracleError(f"LOOPSPEC_GEMV_CONFIG={path}: expected an object of kernel name -> {form}")
        for name, tiles in data.items():
            ints = all(isinstance(t, int) and not isinstance(t, bool) for t in tiles)
            if not ints or any(t < 1 for t in tiles[:4]) or (len(tiles) >= 5 and tiles[4] < 0) or min(tiles) < 0:
                raise OracleError(
                    f"LOOPSPEC_GEMV_CONFIG={path}: kernel {name!r} has tiles {tiles}; expected "
                    f"integers {form}, each >= 1 (peel, prefetch >= 0)"
                )
            if len(tiles) >= 6 and tiles[5] < 1:
                raise OracleError(f"LOOPSPEC_GEMV_CONFIG={path}: kernel {name!r} has split {tiles[5]}; expected >= 1")
            if name not in GEMV_KEYS:
                raise OracleError(
                    f"LOOPSPEC_GEMV_CONFIG={path}: unknown kernel {name!r}; expected one of {', '.join(GEMV_KEYS)}"
                )


@dataclass(frozen=True)
class KernelOptions:
    gemv: bool | None = None  # recurrent calls of <= gemv_max_rows rows through kernels/gemv.py
    fuse: bool | None = None  # torch.compile of the norm/RoPE/SiLU blocks (pads M=1 calls)
    triton_attn: bool | None = None  # split-KV decode attention (kernels/triton_attention.py)
    compile_dynamic: str = "rows"  # torch.compile: only the row count symbolic ("rows") or every dim ("all")
    gemv_config: dict = field(default_factory=dict)  # GEMV tile overrides per kernel name
    gemv_max_rows: int = GEMV_MAX_ROWS  # calls of up to this many rows take the GEMV path (1..16)
    pdl: bool | None = None  # programmatic dependent launch of the GEMV-path kernels (sm_90+)
    pdl_trigger: str = "wait"  # a kernel lets its successor launch after its PDL wait, or at its "start"
    program_norm_rows: int = PROGRAM_NORM_ROWS  # calls of <= this many rows norm qkv's, gate_up's input per program
    attn_early_rows: int = ATTN_EARLY_ROWS  # calls of <= this many rows load attention's older keys before the PDL wait
    fault: str = ""  # a deliberate fault: "attn_scale=1.01" | "rope_theta=1.01" | "input_layernorm.0=1.01"
    invariant: bool = False  # every call and head on kernels/invariant.py's batch-invariant primitives

    def __post_init__(self):
        if self.pdl_trigger not in PDL_TRIGGERS:
            raise OracleError(
                f"KernelOptions.pdl_trigger={self.pdl_trigger!r}: expected one of {', '.join(PDL_TRIGGERS)}"
            )
        if self.compile_dynamic not in COMPILE_DYNAMIC:
            raise OracleError(
                f"KernelOptions.compile_dynamic={self.compile_dynamic!r}: expected one of {', '.join(COMPILE_DYNAMIC)}"
            )
        if (
            isinstance(self.gemv_max_rows, bool)
            or not isinstance(self.gemv_max_rows, int)
            or not 1 <= self.gemv_max_rows <= 16
        ):
            raise OracleError(f"KernelOptions.gemv_max_rows={self.gemv_max_rows!r}: expected an integer in 1..16")
        for name in ("attn_early_rows", "program_norm_rows"):
            rows = getattr(self, name)
            if isinstance(rows, bool) or not isinstance(rows, int) or not 0 <= rows <= 16:
                raise OracleError(f"KernelOptions.{name}={rows!r}: expected an integer in 0..16")
        for name in ("gemv", "fuse", "triton_attn", "pdl"):
            if getattr(self, name) not in (None, True, False):
                raise OracleError(f"KernelOptions.{name}={getattr(self, name)!r}: expected None, True or False")
        object.__setattr__(self, "gemv_config", {k: tuple(v) for k, v in dict(self.gemv_config).items()})
        for name in self.gemv_config:
            if name not in GEMV_KEYS:
                known = ", ".join(GEMV_KEYS)
                raise OracleError(f"KernelOptions.gemv_config: unknown kernel {name!r}; expected one of {known}")
        if not isinstance(self.invariant, bool):
            raise OracleError(f"KernelOptions.invariant={self.invariant!r}: expected True or False")
        if self.fault in INVARIANT_FAULTS and not self.invariant:
            raise OracleError(
                f"kernel fault {self.fault!r} needs the invariant mode (KernelOptions.invariant, LOOPSPEC_INVARIANT=1)"
            )
        parse_fault(self.fault)

    @classmethod
    def from_env(cls, env=None) -> "KernelOptions":
        """The options the LOOPSPEC_* variables ask for (checked: check_env); only the CLI-facing
        factories call this."""
        env = os.environ if env is None else env
        check_env(env)
        kw = {name: False for name in ("gemv", "fuse", "triton_attn", "pdl") if env.get(ENV[name], "1") == "0"}
        kw["compile_dynamic"] = env.get(ENV["compile_dynamic"], "rows")
        kw["pdl_trigger"] = env.get(ENV["pdl_trigger"], "wait")
        for name in ("attn_early_rows", "program_norm_rows"):
            if env.get(ENV[name]):
                kw[name] = int(env[ENV[name]])
        if env.get(ENV["gemv_max_rows"]):
            kw["gemv_max_rows"] = int(env[ENV["gemv_max_rows"]])
        kw["fault"] = env.get(ENV["fault"], "")
        kw["invariant"] = env.get(ENV["invariant"], "0") == "1"
        path = env.get(ENV["gemv_config"])
        if path:
            with open(path) as f:
                kw["gemv_config"] = json.load(f)
        return cls(**kw)

    def resolve(self, device) -> tuple[bool, bool, bool, bool]:
        """(gemv, fuse, triton_attn, pdl) as taken on `device`: None means on where available."""
        from . import gemv as gemv_kernels, triton_attention

        import torch

        device = torch.device(device)
        on = {
            "gemv": gemv_kernels.available(device),
            "fuse": device.type == "cuda",
            "triton_attn": triton_attention.available(device),
            "pdl": gemv_kernels.pdl_available(device),
        }
        for name in ("gemv", "triton_attn"):
            if getattr(self, name) and gemv_kernels.triton is None:
                raise OracleError(f"KernelOptions.{name}=True needs Triton (not installed)")
        if self.pdl and not on["pdl"]:
            raise OracleError(
                f"KernelOptions.pdl=True needs Triton and a CUDA device of compute capability >= 9 (got {device})"
            )
        names = ("gemv", "fuse", "triton_attn", "pdl")
        return tuple(on[n] if getattr(self, n) is None else getattr(self, n) for n in names)


# Sampling-chain faults (kernels/engine_heads.py Engine._processed): "skip_draft.STEP" / "skip_verify.STEP"
# skip one step of the chain on the draft rows / the verification rows only: STEP is "mask"
# (banned and allowed ids), a processor step (kernels/rows.py STEPS: "bad_words", "min_tokens",
# "logit_bias", "penalties", ...) or one penalty ("repetition", "presence", "frequency"). For the
# built-in cases' power (meta_tests/test_cases_bite.py): each must change a token in `check`.
CHAIN_ROWS = ("skip_draft", "skip_verify")
PENALTY_ROWS = {"repetition": ("rep", 1.0), "presence": ("pres", 0.0), "frequency": ("freq", 0.0)}


def chain_fault(fault: str) -> tuple[str, str] | None:
    """ "skip_draft.STEP" | "skip_verify.STEP" -> ("draft" | "verify", STEP); any other fault -> None."""
    rows, _, step = fault.partition(".")
    if rows not in CHAIN_ROWS:
        return None
    from .rows import STEPS

    if step not in ("mask", *STEPS, *PENALTY_ROWS):
        raise OracleError(
            f"kernel fault {fault!r}: expected {rows}.STEP, STEP one of mask, {', '.join((*STEPS, *PENALTY_ROWS))}"
        )
    return rows.removeprefix("skip_"), step


def parse_fault(fault: str) -> tuple[str, int | None, float | None] | None:
    """ "name[.layer]=factor" -> (name, layer, factor); a bits fault "name[.layer]=B" -> (name, layer,
    B); a precision fault "fp8_k" | "fp8_v" | "fp8_act"
    | "fp8_gate_up.L" -> (name, layer, None); "" -> None. A malformed fault is refused."""
    if not fault or fault in INVARIANT_FAULTS or chain_fault(fault):  # no weight or precision fault
        return None
    name, _, layer = fault.partition(".")
    if name in PRECISION_FAULTS:
        if (name == "fp8_gate_up") != layer.isdigit() or (layer and name != "fp8_gate_up"):
            raise OracleError(f"kernel fault {fault!r}: expected fp8_k, fp8_v, fp8_act or fp8_gate_up.L (L a layer)")
        return name, int(layer) if layer else None, None
    what, eq, factor = fault.partition("=")
    name, _, layer = what.partition(".")
    try:
        f = float(factor)
        li = int(layer) if layer else None
    except ValueError:
        f = li = None
    if name in BITS_FAULTS:
        if not eq or f is None or not 2 <= f <= 8 or (name in BITS_LAYER_REQUIRED and li is None):
            raise OracleError(
                f"kernel fault {fault!r}: expected {name}{'.L' if name in BITS_LAYER_REQUIRED else '[.L]'}=B "
                "(B significant bits in [2, 8], L a layer)"
            )
        if li is not None and li < 0:
            raise OracleError(f"kernel fault {fault!r}: the layer must be >= 0")
        return name, li, f
    if (
        not eq
        or name not in FAULTS
        or f is None
        or not f > 0
        or (name == "input_layernorm") != (li is not None)
        or (li is not None and li < 0)
    ):
        raise OracleError(
            f"kernel fault {fault!r}: expected attn_scale=F, rope_theta=F or input_layernorm.L=F "
            "(F > 0, L a layer), fp8_k, fp8_v, fp8_act, fp8_gate_up.L, or k_bits[.L]=B, v_bits[.L]=B, "
            "attn_out_bits.L=B, o_weight_bits.L=B, or (invariant) inv_splitk, inv_attn_split, inv_norm_block"
        )
    return name, li, f
