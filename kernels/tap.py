"""The armed row of TorchSession.capture (oracle/runtime/contract.py OPTIONAL_SESSION "capture"): request
`rid`, position, depth (the KV plane's depth, 0..D-1, whose call computes the row). Every call that
computes that row records its intermediates (oracle/capture.py Captured; the model's paths in
kernels/model.py and kernels/invariant.py call `put`), and a head run on the hidden state that call
produced records `head`. Values are stored as float32 numpy arrays: a bfloat16 or float16 value
widened (exact, so its bits are kept), FP32 as it is."""

from __future__ import annotations

import numpy as np
import torch

from oracle.capture import Captured
from oracle.errors import OracleError


class Tap:
    __slots__ = ("rid", "position", "depth", "slot", "flat", "records", "layers")

    def __init__(self, rid, position: int, depth: int, layers: int, records: list):
        self.rid, self.position, self.depth, self.layers = rid, position, depth, layers
        self.slot = None  # the request's KV slot while it is in the session
        self.flat = None  # the round-state row (slot * T + offset) holding the armed row's output
        self.records = records  # appended to: the session's list (TorchSession.captured)

    @classmethod
    def arm(cls, rid, position, depth, D: int, layers: int, records: list) -> "Tap":
        """A tap on (rid, position, depth), its arguments checked (OracleError)."""
        ok = lambda x: isinstance(x, (int, np.integer)) and not isinstance(x, bool)
        if not (ok(position) and position >= 0 and ok(depth) and 0 <= depth < D):
            raise OracleError(
                f"capture({rid!r}, {position!r}, {depth!r}): expected a position >= 0 and a depth in 0..{D - 1}"
            )
        return cls(rid, int(position), int(depth), layers, records)

    def row(self, plane: torch.Tensor, pos: torch.Tensor, n_slots: int) -> int | None:
        """Where the armed row is in a call of rows (plane, pos) [M], or None."""
        if self.slot is None:
            return None
        hit = ((plane == self.depth * n_slots + self.slot) & (pos == self.position)).nonzero()
        return int(hit[0, 0]) if hit.numel() else None

    def put(self, op: str, layer: int, rows: int, value: torch.Tensor) -> None:
        self.records.append(Captured(op, layer, rows, value.detach().float().cpu().numpy().copy()))

    def follow(self, flat: torch.Tensor, plane: torch.Tensor, pos: torch.Tensor, n_slots: int) -> None:
        """After a call writing round-state rows `flat`: which of them holds the armed row's output."""
        r = self.row(plane, pos, n_slots)
        if r is not None:
            self.flat = int(flat[r])
        elif self.flat is not None and bool((flat == self.flat).any()):
            self.flat = None  # overwritten by another depth or position

    def head(self, flat: torch.Tensor, logits: torch.Tensor) -> None:
        """A head ran on round-state rows `flat` [Mh]: record the armed row's logits if it is one."""
        if self.flat is None:
            return
        hit = (flat == self.flat).nonzero()
        if hit.numel():
            self.put("head", self.layers, flat.shape[0], logits[int(hit[0, 0])])
