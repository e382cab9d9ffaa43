"""Shape rules of the PyTorch drop-in, shared by its torch and NumPy front ends.

``torch.nn.functional.scaled_dot_product_attention`` takes query [..., L, E],
key [..., S, E] and value [..., S, Ev] whose leading axes broadcast, the axis
-3 being the heads. The library takes 4-D views [B, H, N, d]. This module works
out, from the shapes alone, how to present the caller's arrays as such views
without copying them: broadcast axes become zero strides, a key/value with one
head is passed as it is (the library's multi-query attention reads it for every
query head), and more than one leading batch axis is merged into B (a copy
only where the strides do not allow a view).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence, Tuple


Shape = Tuple[int, ...]


# One error type for the package: the C++ library's (a RuntimeError, as
# torch raises), whose messages name the argument, what was expected and what
# was given.
from ._sdpa import Error


def broadcast_shapes(*shapes: Sequence[int], what: str) -> Shape:
    out = []
    for axis in range(max((len(s) for s in shapes), default=0)):
        size = 1
        for s in shapes:
            if axis < len(s):
                n = s[len(s) - 1 - axis]
                if n != 1:
                    if size not in (1, n):
                        raise Error(
                            f"{what}: expected leading axes that broadcast, got shapes "
                            + ", ".join(str(list(x)) for x in shapes)
                        )
                    size = n
        out.append(size)
    return tuple(reversed(out))


@dataclass
class Plan:
    """How query, key and value are viewed as [B, H, N, d]."""

    batch: Shape  # the broadcast axes before the heads (merged into B)
    heads: int  # H, the query heads of the views
    kv_heads: int  # Hkv of the key/value views: 1, a divisor of H (GQA) or H
    out_shape: Shape  # the caller-facing output shape


def plan_sdpa(q: Shape, k: Shape, v: Shape, enable_gqa: bool) -> Plan:
    """torch's SDPA shape rules; raises Error where torch raises."""
    for name, s in (("query", q), ("key", k), ("value", v)):
        if len(s) < 2:
            raise Error(f"{name}: expected a tensor of rank >= 2 ([..., N, E]), got rank {len(s)}")
    if q[-1] != k[-1]:
        raise Error(f"key: expected the head size of query, {q[-1]}, as its last size, got shape {list(k)}")
    if k[-2] != v[-2]:
        raise Error(f"value: expected {k[-2]} keys (those of key), got shape {list(v)}")

    def heads_of(s: Shape) -> int:
        return s[-3] if len(s) >= 3 else 1

    qh, kh, vh = heads_of(q), heads_of(k), heads_of(v)
    gqa = enable_gqa and len(q) >= 3 and (kh != qh or vh != qh)
    if not gqa:
        for name, n in (("key", kh), ("value", vh)):
            if n not in (1, qh) and qh != 1:
                raise Error(
                    f"The size of tensor a ({qh}) must match the size of tensor b ({n}) at non-singleton "
                    f"dimension {len(q) - 3}: {name} has {n} heads and query {qh} (enable_gqa=True allows "
                    "fewer key/value heads that divide the query's)"
                )
    if gqa:
        if kh != vh:
            raise Error(f"value: expected the heads of key, {kh}, got {vh}")
        if kh == 0 or qh % kh != 0:
            raise Error("Number of heads in key and value must divide the number of heads in query")
        batch = broadcast_shapes(q[:-3], k[:-3], v[:-3], what="query, key, value")
        lead = batch + (qh,)
    else:
        lead = broadcast_shapes(q[:-2], k[:-2], v[:-2], what="query, key, value")
    batch, heads = (lead[:-1], lead[-1]) if lead else ((), 1)
    kv_heads = kh if kh == vh and (kh == 1 or kh == heads or (enable_gqa and heads % kh == 0)) else heads
    return Plan(batch=batch, heads=heads, kv_heads=kv_heads, out_shape=lead + (q[-2], v[-1]))


def check_mask_shape(mask: Shape, plan: Plan, L: int, S: int) -> None:
    target = plan.batch + (plan.heads, L, S)
    ok = len(mask) <= len(target) and all(m in (1, t) for m, t in zip(reversed(mask), reversed(target)))
    if not ok:
        raise Error(f"attn_mask: expected a shape that broadcasts to {list(target)}, got {list(mask)}")
