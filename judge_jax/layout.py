"""Layout: the device shapes of a model, padded with exact zeros to one canonical small shape.

A property suite draws hundreds of random tiny configs (hidden 8-32, 1-3 layers, 1-4 heads,
head_dim 2-8, vocab 16-256); compiled per config, each costs ~1 s of XLA compilation. Every
config that fits the canonical shape (CANON) is instead padded to it, so they all share the
same few programs. The padding is exact, not approximate:
* hidden, intermediate, vocab: zero rows/columns; padded hidden entries stay exactly 0 through
  every residual add, and RMSNorm divides its sum of squares by the true hidden size;
* heads: real query head h of kv head k = h // g goes to padded head k * g_pad + h % g; padded
  query heads have zero q and zero o_proj rows (they add exactly 0); padded kv heads are 0;
* head_dim: real dim e < hd/2 goes to e, e >= hd/2 to hd_pad/2 + e - hd/2, so rotate_half
  pairs stay pairs; the RoPE table carries the true frequencies there (cos 1, sin 0 elsewhere)
  and the attention scale is the true head_dim ** -0.5.
Configs that do not fit (the small and ouro-1.4b presets) run unpadded.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from oracle.config import ModelConfig

from . import layers

# hidden, intermediate, vocab, kv heads, query heads per kv head, head_dim (layers are not
# padded: a zero layer is the identity, but it would cost as much as a real one)
CANON = {"H": 32, "I": 64, "V": 256, "nkv": 4, "group": 2, "hd": 8}


@dataclass(frozen=True)
class Layout:
    cfg: ModelConfig
    H: int
    I: int
    V: int
    L: int
    nkv: int
    group: int
    hd: int

    @staticmethod
    def for_config(cfg: ModelConfig, pad: bool = True) -> "Layout":
        real = {
            "H": cfg.hidden_size,
            "I": cfg.intermediate_size,
            "V": cfg.vocab_size,
            "nkv": cfg.num_kv_heads,
            "group": cfg.num_heads // cfg.num_kv_heads,
            "hd": cfg.head_dim,
        }
        fits = pad and cfg.head_dim % 2 == 0 and all(real[k] <= CANON[k] for k in CANON)
        return Layout(cfg, L=cfg.num_layers, **(CANON if fits else real))

    @property
    def padded(self) -> bool:
        c = self.cfg
        return (self.H, self.I, self.V, self.L, self.nkv, self.hd) != (
            c.hidden_size,
            c.intermediate_size,
            c.vocab_size,
            c.num_layers,
            c.num_kv_heads,
            c.head_dim,
        ) or self.group != c.num_heads // c.num_kv_heads

    @property
    def dims(self) -> tuple[int, int, int]:
        return self.nkv * self.group, self.nkv, self.hd  # heads, kv heads, head_dim

    def dim_index(self) -> np.ndarray:
        """Padded position of each real head dim: [hd]."""
        half, half_p = self.cfg.head_dim // 2, self.hd // 2
        e = np.arange(self.cfg.head_dim)
        return np.where(e < half, e, half_p + e - half)

    def q_index(self) -> np.ndarray:
        """Padded columns of the real q (or o_proj rows): [nh * hd]."""
        g = self.cfg.num_heads // self.cfg.num_kv_heads
        h = np.arange(self.cfg.num_heads)
        heads = (h // g) * self.group + h % g
        return (heads[:, None] * self.hd + self.dim_index()[None, :]).reshape(-1)

    def kv_index(self) -> np.ndarray:
        """Padded columns of the real k / v: [nkv * hd]."""
        k = np.arange(self.cfg.num_kv_heads)
        return (k[:, None] * self.hd + self.dim_index()[None, :]).reshape(-1)

    def pad_params(self, host: dict) -> dict:
        """checkpoint.host_params() output -> the same tensors in this layout, plus the consts."""
        cfg = self.cfg
        consts = {"hidden": np.float32(cfg.hidden_size), "scale": np.float32(cfg.head_dim**-0.5)}
        if not self.padded:
            return host | {"consts": consts}
        H, L = cfg.hidden_size, cfg.num_layers
        nq, nk = self.nkv * self.group * self.hd, self.nkv * self.hd
        qi, ki = self.q_index(), self.kv_index()

        def put(shape, value, index=np.s_[...]):
            out = np.zeros(shape, np.float32)
            out[index] = value
            return out

        lay = host["layers"]
        out = {
            "wq": put((self.L, self.H, nq), lay["wq"], np.s_[:L, :H, qi]),
            "wk": put((self.L, self.H, nk), lay["wk"], np.s_[:L, :H, ki]),
            "wv": put((self.L, self.H, nk), lay["wv"], np.s_[:L, :H, ki]),
            "wo": put((self.L, nq, self.H), lay["wo"], np.s_[:L, qi, :H]),
            "wg": put((self.L, self.H, self.I), lay["wg"], np.s_[:L, :H, : cfg.intermediate_size]),
            "wu": put((self.L, self.H, self.I), lay["wu"], np.s_[:L, :H, : cfg.intermediate_size]),
            "wd": put((self.L, self.I, self.H), lay["wd"], np.s_[:L, : cfg.intermediate_size, :H]),
        }
        for k in ("n_in", "n_attn_out", "n_post", "n_mlp_out"):
            out[k] = put((self.L, self.H), lay[k], np.s_[:L, :H])
        return {
            "embed": put((self.V, self.H), host["embed"], np.s_[: cfg.vocab_size, :H]),
            "norm": put((self.H,), host["norm"], np.s_[:H]),
            "lm_head": put((self.H, self.V), host["lm_head"], np.s_[:H, : cfg.vocab_size]),
            "layers": out,
            "consts": consts,
        }

    def rope(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        """cos, sin: [n, hd_pad], the true frequencies at the real dims."""
        cos, sin = layers.rope_table(n, self.cfg.head_dim, self.cfg.rope_theta)
        if not self.padded:
            return cos, sin
        di = self.dim_index()
        cp, sp = np.ones((n, self.hd), np.float32), np.zeros((n, self.hd), np.float32)
        cp[:, di], sp[:, di] = cos, sin
        return cp, sp

    def unpad_kv(self, x: np.ndarray) -> np.ndarray:
        """[..., nkv_pad, hd_pad] -> [..., nkv, hd]."""
        if not self.padded:
            return x
        return x[..., : self.cfg.num_kv_heads, :][..., self.dim_index()]
