"""Tensor-parallel placement of the JAX judge with jax.sharding (a named Mesh, axis "tp").

* attention: q/k/v projections split over their output (head) columns, o_proj over its
  input (head) rows; the KV planes [L, P, S, N, nkv, hd] over the kv-head axis;
* MLP: gate/up over the intermediate columns, down over the intermediate rows;
* norms, the embedding and lm_head replicated.
jit (GSPMD) partitions the programs from these input placements and inserts the all-reduces
after o_proj and down_proj. Heads, kv heads and the intermediate size must divide by the
mesh size (checked, named in the error).
"""

from __future__ import annotations

import jax
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from oracle.errors import OracleError

AXIS = "tp"

# stacked layer weights are [L, in, out]
LAYER_SPECS = {
    "wq": P(None, None, AXIS),
    "wk": P(None, None, AXIS),
    "wv": P(None, None, AXIS),
    "wo": P(None, AXIS, None),
    "wg": P(None, None, AXIS),
    "wu": P(None, None, AXIS),
    "wd": P(None, AXIS, None),
    "n_in": P(),
    "n_attn_out": P(),
    "n_post": P(),
    "n_mlp_out": P(),
}


def check_divisible(layout, mesh: Mesh) -> None:
    """layout: the model's layout.Layout (the device shapes that are split)."""
    n = mesh.shape[AXIS]
    for what, v in (
        ("num_heads", layout.nkv * layout.group),
        ("num_kv_heads", layout.nkv),
        ("intermediate_size", layout.I),
    ):
        if v % n:
            raise OracleError(f"tensor parallelism over {n} devices: {what}={v} is not a multiple of {n}")


def place_params(host: dict, mesh: Mesh) -> dict:
    """host: checkpoint.host_params() output (layers stacked, or a list of per-layer dicts) ->
    device arrays placed on the mesh."""
    rep = NamedSharding(mesh, P())
    out = {k: jax.device_put(host[k], rep) for k in ("embed", "norm", "lm_head", "consts")}
    layers = host["layers"]
    if isinstance(layers, dict):  # stacked [L, in, out]
        out["layers"] = {k: jax.device_put(v, NamedSharding(mesh, LAYER_SPECS[k])) for k, v in layers.items()}
    else:  # one dict per layer: the specs without the L axis
        out["layers"] = [
            {k: jax.device_put(v, NamedSharding(mesh, P(*LAYER_SPECS[k][1:]))) for k, v in lw.items()} for lw in layers
        ]
    return out


def kv_sharding(mesh: Mesh) -> NamedSharding:
    return NamedSharding(mesh, P(None, None, None, None, AXIS, None))
