"""KV planes: one per (request, depth, layer) (docs/DESIGN.md sections 3 and 7).

A plane holds positions 0..frontier-1 contiguously. Writes append at the frontier (a write
anywhere else is an error), every write is logged with the call that made it, rollback
truncates to a frontier, and a read of a position that was never written or was rolled
back raises with the address.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .errors import OracleError


class KVError(OracleError):
    pass


@dataclass(slots=True)
class KVWrite:
    request: object
    position: int
    depth: int
    layer: int
    call: int
    k: np.ndarray  # [nkv, hd]
    v: np.ndarray  # [nkv, hd]


class _Plane:
    __slots__ = ("k", "v", "n")

    def __init__(self, nkv: int, hd: int, cap: int = 16):
        self.k = np.empty((cap, nkv, hd), np.float32)
        self.v = np.empty((cap, nkv, hd), np.float32)
        self.n = 0

    def append(self, k, v):
        if self.n == len(self.k):
            self.k = np.concatenate([self.k, np.empty_like(self.k)])
            self.v = np.concatenate([self.v, np.empty_like(self.v)])
        self.k[self.n], self.v[self.n] = k, v
        self.n += 1


class KVCache:
    def __init__(self, num_layers: int, num_depths: int, num_kv_heads: int, head_dim: int):
        self.num_layers, self.num_depths = num_layers, num_depths
        self.nkv, self.hd = num_kv_heads, head_dim
        self.planes: dict[tuple, _Plane] = {}
        self.log: list[KVWrite] = []
        self.request_depths: dict = {}  # request -> its depth planes D_i (default: num_depths)

    def set_depths(self, request, num_depths: int) -> None:
        """A request whose rounds verify with D_i < num_depths loops owns planes 0..D_i-1 only."""
        if not 1 <= num_depths <= self.num_depths:
            raise KVError(f"request {request}: {num_depths} depth planes, the cache holds 1..{self.num_depths}")
        self.request_depths[request] = num_depths

    def depths_of(self, request) -> int:
        return self.request_depths.get(request, self.num_depths)

    def _plane(self, request, depth, layer, create=False) -> _Plane:
        if not (0 <= depth < self.depths_of(request) and 0 <= layer < self.num_layers):
            raise KVError(
                f"KV address (request {request}, depth {depth}, layer {layer}) is outside "
                f"{self.depths_of(request)} depths x {self.num_layers} layers"
            )
        key = (request, depth, layer)
        p = self.planes.get(key)
        if p is None:
            if not create:
                raise KVError(f"KV read of request {request} depth {depth} layer {layer}: plane never written")
            p = self.planes[key] = _Plane(self.nkv, self.hd)
        return p

    def write(self, request, position: int, depth: int, layer: int, k, v, call: int) -> None:
        p = self._plane(request, depth, layer, create=True)
        if position != p.n:
            raise KVError(
                f"KV write of request {request} position {position} depth {depth} layer {layer} "
                f"(call {call}): the plane's frontier is {p.n}, writes must append there"
            )
        p.append(k, v)
        self.log.append(
            KVWrite(request, position, depth, layer, call, np.array(k, np.float32), np.array(v, np.float32))
        )

    def read(self, request, depth: int, layer: int, upto: int) -> tuple[np.ndarray, np.ndarray]:
        """K, V of positions 0..upto: [upto+1, nkv, hd] each."""
        p = self._plane(request, depth, layer)
        if upto >= p.n:
            raise KVError(
                f"KV read of request {request} position {upto} depth {depth} layer {layer}: "
                f"never written or rolled back (frontier {p.n})"
            )
        return p.k[: upto + 1], p.v[: upto + 1]

    def frontier(self, request, depth: int = 0, layer: int = 0) -> int:
        p = self.planes.get((request, depth, layer))
        return 0 if p is None else p.n

    def frontiers(self, request) -> set[int]:
        return {self.frontier(request, j, l) for j in range(self.depths_of(request)) for l in range(self.num_layers)}

    def truncate(self, request, frontier: int) -> None:
        """Roll back every plane of `request` to positions 0..frontier-1."""
        if frontier < 0:
            raise KVError(f"rollback of request {request} to negative frontier {frontier}")
        for j in range(self.depths_of(request)):
            for l in range(self.num_layers):
                p = self.planes.get((request, j, l))
                n = 0 if p is None else p.n
                if frontier > n:
                    raise KVError(
                        f"rollback of request {request} to frontier {frontier}, but depth {j} "
                        f"layer {l} holds only {n} positions"
                    )
                if p is not None:
                    p.n = frontier

    def drop(self, request) -> None:
        for key in [k for k in self.planes if k[0] == request]:
            del self.planes[key]
        self.request_depths.pop(request, None)
