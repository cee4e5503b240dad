"""Model configuration and presets (docs/DESIGN.md section 2)."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from .errors import OracleError


@dataclass(slots=True, frozen=True)
class ModelConfig:
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rope_theta: float = 1e6
    rms_norm_eps: float = 1e-6
    total_loops: int = 4  # D of the checkpoint (Ouro's total_ut_steps)

    def __post_init__(self):
        for name in (
            "vocab_size",
            "hidden_size",
            "intermediate_size",
            "num_layers",
            "num_heads",
            "num_kv_heads",
            "head_dim",
            "total_loops",
        ):
            v = getattr(self, name)
            if not isinstance(v, int) or v < 1:
                raise OracleError(f"config: {name} must be a positive integer, got {v!r}")
        if self.num_heads % self.num_kv_heads:
            raise OracleError(
                f"config: num_heads {self.num_heads} is not a multiple of num_kv_heads {self.num_kv_heads}"
            )
        if not (self.rope_theta > 0 and self.rms_norm_eps > 0):
            raise OracleError("config: rope_theta and rms_norm_eps must be positive")

    def to_dict(self) -> dict:
        return asdict(self)

    # HF config.json (Ouro's keys) <-> ModelConfig
    def to_hf(self) -> dict:
        return {
            "architectures": ["OuroForCausalLM"],
            "model_type": "ouro",
            "vocab_size": self.vocab_size,
            "hidden_size": self.hidden_size,
            "intermediate_size": self.intermediate_size,
            "num_hidden_layers": self.num_layers,
            "num_attention_heads": self.num_heads,
            "num_key_value_heads": self.num_kv_heads,
            "head_dim": self.head_dim,
            "rope_theta": self.rope_theta,
            "rms_norm_eps": self.rms_norm_eps,
            "total_ut_steps": self.total_loops,
            "hidden_act": "silu",
            "tie_word_embeddings": False,
            "early_exit_threshold": 1.0,
        }

    @staticmethod
    def from_hf(hf: dict) -> "ModelConfig":
        required = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads")
        missing = [k for k in required if k not in hf]
        if missing:
            raise OracleError(f"config.json: missing key(s) {', '.join(missing)}")
        if hf.get("tie_word_embeddings", False):
            raise OracleError("config.json: tie_word_embeddings=true, but Ouro's lm_head is untied")
        if hf.get("hidden_act", "silu") != "silu":
            raise OracleError(f"config.json: hidden_act {hf['hidden_act']!r} is not silu")
        for key in required + ("num_key_value_heads", "head_dim", "total_ut_steps"):
            v = hf.get(key, 1)
            if key == "head_dim" and v is None:
                continue
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise OracleError(f"config.json: {key} must be a positive integer, got {v!r}")
        for key in ("rope_theta", "rms_norm_eps"):
            v = hf.get(key, 1.0)
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise OracleError(f"config.json: {key} must be a number, got {v!r}")
        _refuse_unmodelled(hf)
        heads = hf["num_attention_heads"]
        return ModelConfig(
            vocab_size=hf["vocab_size"],
            hidden_size=hf["hidden_size"],
            intermediate_size=hf["intermediate_size"],
            num_layers=hf["num_hidden_layers"],
            num_heads=heads,
            num_kv_heads=hf.get("num_key_value_heads", OURO_DEFAULTS["num_key_value_heads"]),
            head_dim=hf.get("head_dim") or hf["hidden_size"] // heads,
            rope_theta=float(hf.get("rope_theta", OURO_DEFAULTS["rope_theta"])),
            rms_norm_eps=float(hf.get("rms_norm_eps", 1e-6)),
            total_loops=int(hf.get("total_ut_steps", 4)),
        )


# What a config.json without the key means: the defaults of Ouro's own OuroConfig (the
# configuration_ouro.py shipped with ByteDance/Ouro-1.4B, Qwen2-style: num_key_value_heads=32,
# rope_theta=10000.0, rope_scaling=None, use_sliding_window=False), read 2026-12-05 in a public vLLM
# port of it whose defaults are "aligned with the official Ouro configuration". An absent
# num_key_value_heads is 32 there, not the head count.
OURO_DEFAULTS = {"num_key_value_heads": 32, "rope_theta": 10000.0}


def _refuse_unmodelled(hf: dict) -> None:
    """Keys that change the model in ways the reference does not compute (RoPE scaling, sliding
    windows): refused, never read without them."""
    if hf.get("rope_scaling") is not None:
        raise OracleError(
            f"config.json: rope_scaling {hf['rope_scaling']!r} is not modelled (the reference computes plain RoPE; "
            "give null or leave the key out)"
        )
    if hf.get("use_sliding_window", False):
        raise OracleError(
            "config.json: use_sliding_window is true; the reference attends over the whole context (no sliding window)"
        )
    types = hf.get("layer_types")
    if types is not None:
        if not isinstance(types, list) or any(t != "full_attention" for t in types):
            raise OracleError(
                f"config.json: layer_types {str(types)[:80]} names other than full_attention; the reference "
                "computes full attention in every layer"
            )


PRESETS: dict[str, ModelConfig] = {
    # tests and the CLI: every round is milliseconds
    "tiny": ModelConfig(
        vocab_size=64, hidden_size=32, intermediate_size=64, num_layers=2, num_heads=4, num_kv_heads=4, head_dim=8
    ),
    "small": ModelConfig(
        vocab_size=512, hidden_size=128, intermediate_size=352, num_layers=4, num_heads=4, num_kv_heads=4, head_dim=32
    ),
    "ouro-1.4b": ModelConfig(
        vocab_size=49152,
        hidden_size=2048,
        intermediate_size=5632,
        num_layers=24,
        num_heads=16,
        num_kv_heads=16,
        head_dim=128,
    ),
}


def preset(name: str) -> ModelConfig:
    if name not in PRESETS:
        raise OracleError(f"unknown preset {name!r} (known: {', '.join(PRESETS)})")
    return PRESETS[name]
