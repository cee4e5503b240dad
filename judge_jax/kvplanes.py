"""DeviceKV: the per-(depth, layer) KV planes of a JAX session, on the device.

k, v: [L, P, S, N, nkv, hd] device arrays (L layers, P >= D depth planes, S request slots,
N positions), preallocated and grown (doubled) when a request or a position does not fit.
The host keeps one frontier per (request, depth) (all layers of a depth are written by the
same rows); writes must append at the frontier, rollback moves it back, and a read of a
position at or past it raises KVError (docs/DESIGN.md section 7). Device data past a
frontier is stale but never attended: a row at position p attends to positions <= p, and p
is written by that same call before it is read.

pool: [rows, H] device array, the hidden states of a round's rows (loop inputs and outputs,
model.JaxLoopedModel.call); which row holds which (request, position) is the round's
business (backend._RoundModel). Grown (doubled) on demand; stale rows are never read.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from oracle.kv import KVError, KVWrite

from .programs import pow2


class DeviceKV:
    def __init__(self, layout, num_depths: int, slots: int = 8, max_len: int = 64, sharding=None, pool_rows: int = 64):
        """layout: the model's layout.Layout (device shapes, possibly padded); pool_rows: the
        hidden-state pool's first size (it grows by doubling)."""
        self.layout, self.num_layers, self.num_depths = layout, layout.cfg.num_layers, num_depths
        self.L, self.nkv, self.hd = layout.L, layout.nkv, layout.hd
        self.planes = pow2(num_depths)  # fewer distinct cache shapes, fewer programs
        self.sharding = sharding  # a NamedSharding for the cache, or None
        self.slot_of: dict = {}
        self.free = list(range(slots))
        self.front: dict = {}  # rid -> [frontier per depth]
        self.log: list[KVWrite] = []  # writes of the running round (reset per round)
        self.k = self.v = None
        self._alloc(slots, max_len)
        self.pool = jnp.zeros((pool_rows, layout.H), jnp.float32)

    def ensure_pool(self, rows: int) -> None:
        """Room for pool rows 0..rows-1 (grows by doubling, keeping the rows held)."""
        if rows > self.pool.shape[0]:
            old = self.pool
            self.pool = jnp.zeros((pow2(rows), old.shape[1]), jnp.float32).at[: old.shape[0]].set(old)

    @property
    def slots(self) -> int:
        return self.k.shape[2]

    @property
    def max_len(self) -> int:
        return self.k.shape[3]

    def _alloc(self, slots: int, max_len: int) -> None:
        shape = (self.L, self.planes, slots, max_len, self.nkv, self.hd)
        old = (self.k, self.v)
        self.k, self.v = jnp.zeros(shape, jnp.float32), jnp.zeros(shape, jnp.float32)
        if old[0] is not None:
            s, n = old[0].shape[2], old[0].shape[3]
            self.k = self.k.at[:, :, :s, :n].set(old[0])
            self.v = self.v.at[:, :, :s, :n].set(old[1])
        if self.sharding is not None:
            self.k, self.v = jax.device_put(self.k, self.sharding), jax.device_put(self.v, self.sharding)

    def ensure(self, need_len: int) -> None:
        """Room for positions 0..need_len-1 (grows N by doubling)."""
        if need_len > self.max_len:
            self._alloc(self.slots, max(2 * self.max_len, pow2(need_len)))

    # ---- requests ----
    def add(self, rid, num_depths: int | None = None) -> int:
        """A slot for rid, owning depth planes 0..num_depths-1 (default all)."""
        assert rid not in self.slot_of, rid
        if not self.free:
            n = self.slots
            self._alloc(2 * n, self.max_len)
            self.free = list(range(n, 2 * n))
        slot = self.free.pop(0)
        self.slot_of[rid] = slot
        self.front[rid] = [0] * (num_depths or self.num_depths)
        return slot

    def depths_of(self, rid) -> int:
        """Depth planes rid owns (its D_i)."""
        return len(self.front[rid]) if rid in self.front else self.num_depths

    def drop(self, rid) -> None:
        self.free.append(self.slot_of.pop(rid))
        del self.front[rid]

    # ---- the oracle KVCache interface used by oracle.phases and the property suite ----
    def frontier(self, rid, depth: int = 0, layer: int = 0) -> int:
        return self.front[rid][depth] if rid in self.front else 0

    def frontiers(self, rid) -> set[int]:
        return set(self.front.get(rid, [0]))

    def truncate(self, rid, frontier: int) -> None:
        if frontier < 0:
            raise KVError(f"rollback of request {rid} to negative frontier {frontier}")
        f = self.front[rid]
        for j, n in enumerate(f):
            if frontier > n:
                raise KVError(
                    f"rollback of request {rid} to frontier {frontier}, but depth {j} holds only {n} positions"
                )
        self.front[rid] = [frontier] * len(f)

    def read(self, rid, depth: int, layer: int, upto: int):
        """K, V of positions 0..upto: [upto+1, nkv, hd] each (copied to the host)."""
        if rid not in self.front or not (0 <= depth < len(self.front[rid]) and 0 <= layer < self.num_layers):
            raise KVError(f"KV read of request {rid} depth {depth} layer {layer}: plane never written")
        if upto >= self.front[rid][depth]:
            raise KVError(
                f"KV read of request {rid} position {upto} depth {depth} layer {layer}: "
                f"never written or rolled back (frontier {self.front[rid][depth]})"
            )
        s = self.slot_of[rid]
        unpad = self.layout.unpad_kv
        return (
            unpad(np.asarray(self.k[layer, depth, s, : upto + 1])),
            unpad(np.asarray(self.v[layer, depth, s, : upto + 1])),
        )

    def claim(self, rows, call: int) -> list[tuple[int, int, int]]:
        """Check a call's writes (rid, position, depth) append at the frontiers, advance them,
        and return the device rows (slot, position, depth)."""
        for rid, pos, depth in rows:
            if rid not in self.front:
                raise KVError(f"KV write of unknown request {rid} (call {call})")
            if not 0 <= depth < len(self.front[rid]):
                raise KVError(f"KV write of request {rid} at depth {depth}: outside its {len(self.front[rid])} depths")
            f = self.front[rid]
            if pos != f[depth]:
                raise KVError(
                    f"KV write of request {rid} position {pos} depth {depth} (call {call}): "
                    f"the plane's frontier is {f[depth]}, writes must append there"
                )
            f[depth] += 1
        self.ensure(max(p for _, p, _ in rows) + 1)
        return [(self.slot_of[r], p, j) for r, p, j in rows]
