"""KV on the device: one plane per (depth, slot) and layer, in one tensor per K and V.

    k, v: [L, P, max_len, nkv, hd] with plane p = depth * n_slots + slot

A request owns a slot; positions 0..start-1 of its planes are committed (the frontier is
`start`, kept on the device by the rounds). Rolled-back positions are never cleared: reads
are masked by each row's own position, so nothing past the frontier can be read. The last
slot is scratch space for CUDA-graph warm-up runs and never belongs to a request.
"""

from __future__ import annotations

import torch

from oracle.errors import OracleError


class KVPlanes:
    @torch.inference_mode(False)  # session state: never an inference tensor (kernels/session.py)
    def __init__(self, cfg, D: int, n_requests: int, max_len: int, device, dtype):
        self.D, self.max_len = D, max_len
        self.n_slots = n_requests + 1  # + scratch
        self.scratch = n_requests
        self.L, self.nkv, self.hd = cfg.num_layers, cfg.num_kv_heads, cfg.head_dim
        shape = (self.L, D * self.n_slots, max_len, self.nkv, self.hd)
        # zeros, not empty: masked attention weights are exactly 0, and 0 * NaN would leak
        self.k = torch.zeros(shape, device=device, dtype=dtype)
        self.v = torch.zeros(shape, device=device, dtype=dtype)
        self.free = list(range(n_requests))

    @torch.inference_mode(False)  # session state: never an inference tensor (kernels/session.py)
    def grown(self, n_requests: int, max_len: int) -> "KVPlanes":
        """A larger copy: same slots and positions (the old scratch slot becomes free)."""
        assert n_requests >= self.n_slots - 1 and max_len >= self.max_len
        new = KVPlanes.__new__(KVPlanes)
        new.D, new.max_len, new.n_slots, new.scratch = self.D, max_len, n_requests + 1, n_requests
        new.L, new.nkv, new.hd = self.L, self.nkv, self.hd
        keep = self.n_slots - 1
        for name in ("k", "v"):
            old = getattr(self, name)
            t = old.new_zeros((self.L, self.D * new.n_slots, max_len, self.nkv, self.hd))
            t.view(self.L, self.D, new.n_slots, max_len, -1)[:, :, :keep, : self.max_len].copy_(
                old.view(self.L, self.D, self.n_slots, self.max_len, -1)[:, :, :keep]
            )
            setattr(new, name, t)
        new.free = sorted(self.free + list(range(keep, n_requests)))
        return new

    def plane(self, slot: int, depth: int) -> int:
        return depth * self.n_slots + slot

    def alloc(self, rid) -> int:
        if not self.free:
            raise OracleError(f"request {rid}: all {self.n_slots - 1} KV slots are in use (max_requests)")
        return self.free.pop(0)

    def release(self, slot: int) -> None:
        assert slot not in self.free and slot != self.scratch, f"KV slot {slot} released twice"
        self.free.append(slot)
        self.free.sort()

    def flat_view(self, t: torch.Tensor, layer: int) -> torch.Tensor:
        return t[layer].view(-1, self.nkv, self.hd)  # [P*max_len, nkv, hd]

    def poison(self, slots: torch.Tensor, frontier: torch.Tensor, value: float = 1e4) -> None:
        """Debug aid: overwrite every position >= frontier of these slots' planes with a
        large value, so that any unmasked read past the frontier changes results."""
        # slots, frontier: [R] int64 on the device
        planes = (torch.arange(self.D, device=slots.device)[:, None] * self.n_slots + slots[None, :]).reshape(-1)
        fr = frontier[None, :].expand(self.D, -1).reshape(-1)  # [D*R]
        past = torch.arange(self.max_len, device=slots.device)[None, :] >= fr[:, None]  # [D*R, max_len]
        for t in (self.k, self.v):
            sel = t[:, planes]  # [L, D*R, max_len, nkv, hd]
            t[:, planes] = torch.where(past[None, :, :, None, None], torch.full_like(sel, value), sel)

    def gather(self, t: torch.Tensor, slots: torch.Tensor, starts: torch.Tensor, T: int) -> torch.Tensor:
        """t's entries of positions start..start+T-1 at every depth and layer of each slot
        -> [L, R, D, T, nkv, hd] (positions past max_len are clamped; callers drop them)."""
        R = slots.shape[0]
        dev = slots.device
        planes = torch.arange(self.D, device=dev)[None, :] * self.n_slots + slots[:, None]  # [R, D]
        pos = (starts[:, None] + torch.arange(T, device=dev)[None, :]).clamp(max=self.max_len - 1)  # [R, T]
        idx = (planes[:, :, None] * self.max_len + pos[:, None, :]).reshape(-1)  # [R*D*T]
        out = t.view(self.L, -1, self.nkv, self.hd).index_select(1, idx)
        return out.view(self.L, R, self.D, T, self.nkv, self.hd)
