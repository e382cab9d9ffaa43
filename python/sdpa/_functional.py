"""``sdpa.scaled_dot_product_attention``: PyTorch's SDPA, on sdpa's kernels.

The semantics are torch's exactly: query [..., L, E], key [..., S, E], value
[..., S, Ev] with broadcasting leading axes; ``is_causal`` aligned top-left
(query i sees keys j <= i); a bool mask where True means "may attend", a float
mask added to the scaled scores; ``enable_gqa`` for fewer key/value heads; a
query row that sees no key gives zeros. Torch tensors give a torch tensor (with
autograd and torch.compile), NumPy arrays a NumPy array.
"""

from __future__ import annotations

import math
import sys
from typing import Any, Optional

import numpy as np

from . import _sdpa
from ._arrays import Error, Plan, check_mask_shape, plan_sdpa


def _is_torch(x: Any) -> bool:
    # torch is not imported here: a torch tensor means torch is loaded, and
    # `import sdpa` stays quick and leaves torch's start-up settings (such as
    # OMP_WAIT_POLICY, read when its OpenMP runtime loads) to the caller.
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(x, torch.Tensor)


def _check_common(dropout_p: float, is_causal: bool, attn_mask: Any) -> None:
    if not 0.0 <= dropout_p <= 1.0:
        raise Error(f"dropout probability has to be between 0 and 1, but got {dropout_p}")
    if is_causal and attn_mask is not None:
        raise Error("_scaled_dot_product_attention: Explicit attn_mask should not be set when is_causal=True")


def _signed_scale(q, scale: Optional[float]):
    """torch takes any finite scale; the library folds a scale > 0 into Q. A
    negative scale is the same call on -Q, and 0 the same call on 0·Q (so
    gradients stay exact through autograd's own negation). Returns (q, scale);
    a scale that is not finite is left to the library, which refuses it."""
    if scale is None:
        return q, None
    scale = float(scale)
    if scale < 0:
        return -q, -scale
    if scale == 0:
        return q * 0.0, 1.0
    return q, scale


# --- torch ------------------------------------------------------------------


def _torch_4d(x: "torch.Tensor", plan: Plan, heads: int) -> "torch.Tensor":
    if x.dim() == 2:
        x = x.unsqueeze(0)
    while x.dim() < len(plan.batch) + 3:
        x = x.unsqueeze(0)
    x = x.expand(*plan.batch, heads, x.shape[-2], x.shape[-1])
    if len(plan.batch) == 0:
        return x.unsqueeze(0)
    if len(plan.batch) == 1:
        return x
    return x.reshape(-1, heads, x.shape[-2], x.shape[-1])


def _torch_mask_4d(mask: "torch.Tensor", plan: Plan, L: int, S: int) -> "torch.Tensor":
    if len(plan.batch) <= 1:
        return mask
    return mask.expand(*plan.batch, plan.heads, L, S).reshape(-1, plan.heads, L, S)


def _torch_sdpa(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa):
    from . import _torch as ops

    for name, t in (("key", key), ("value", value)):
        if not _is_torch(t):
            raise Error(f"{name}: expected a torch.Tensor like query, got {type(t).__name__}")
    if not (query.dtype == key.dtype == value.dtype):
        raise Error(
            "Expected query, key, and value to have the same dtype, but got query.dtype: "
            f"{query.dtype} key.dtype: {key.dtype} and value.dtype: {value.dtype} instead."
        )
    if query.device.type != "cpu" or key.device.type != "cpu" or value.device.type != "cpu":
        raise Error(f"query: expected tensors on the CPU, got {query.device}")
    qs, ks, vs = query.shape, key.shape, value.shape
    if attn_mask is not None and not _is_torch(attn_mask):
        import torch  # noqa: PLC0415 (loaded: query is a torch tensor)

        attn_mask = torch.as_tensor(attn_mask)
    if (len(qs) == 4 and len(ks) == 4 and len(vs) == 4 and qs[0] == ks[0] == vs[0] and ks[1] == vs[1]
            and (ks[1] == qs[1] or ks[1] == 1 or (enable_gqa and ks[1] and qs[1] % ks[1] == 0))
            and qs[3] == ks[3] and ks[2] == vs[2] and (attn_mask is None or attn_mask.dim() <= 4)):
        # [B, H, N, E] as the library takes it (the common case): nothing to plan.
        q, k, v, mask, out_shape = query, key, value, attn_mask, None
        if mask is not None:
            check_mask_shape(tuple(mask.shape), Plan((qs[0],), qs[1], ks[1], ()), qs[2], ks[2])
    else:
        plan = plan_sdpa(tuple(qs), tuple(ks), tuple(vs), enable_gqa)
        L, S = qs[-2], ks[-2]
        q = _torch_4d(query, plan, plan.heads)
        k = _torch_4d(key, plan, plan.kv_heads)
        v = _torch_4d(value, plan, plan.kv_heads)
        mask, out_shape = None, plan.out_shape
        if attn_mask is not None:
            check_mask_shape(tuple(attn_mask.shape), plan, L, S)
            mask = _torch_mask_4d(attn_mask, plan, L, S)
    q, scale = _signed_scale(q, scale)
    # dropout_p = 1 drops every key: zeros, still connected to the inputs.
    p = 0.0 if dropout_p == 1.0 else float(dropout_p)
    seed = ops.new_seed() if p > 0.0 else None
    out, _, _ = ops.call(ops.attention_op, ops._attention_op_impl, (q, k, v, mask), q, k, v, mask, None, None, seed,
                         "bhsd", scale, bool(is_causal), True, -1, -1, 0.0, p, False)
    if dropout_p == 1.0:
        out = out * 0.0
    return out if out_shape is None else out.reshape(out_shape)


# --- NumPy ------------------------------------------------------------------


def _np_4d(x: np.ndarray, plan: Plan, heads: int) -> np.ndarray:
    if x.ndim == 2:
        x = x[None]
    x = x.reshape((1,) * (len(plan.batch) + 3 - x.ndim) + x.shape)
    x = np.broadcast_to(x, plan.batch + (heads,) + x.shape[-2:])
    if len(plan.batch) == 0:
        return x[None]
    if len(plan.batch) == 1:
        return x
    return x.reshape((-1, heads) + x.shape[-2:])


_NP_FLOATS = (np.float32, np.float16, np.float64)


def _np_sdpa(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa):
    query, key, value = (np.asarray(x) for x in (query, key, value))
    if not (query.dtype == key.dtype == value.dtype):
        raise Error(
            "Expected query, key, and value to have the same dtype, but got query.dtype: "
            f"{query.dtype} key.dtype: {key.dtype} and value.dtype: {value.dtype} instead."
        )
    if query.dtype.type not in _NP_FLOATS:
        raise Error(f"query: expected float32, float16 or float64, got {query.dtype}")
    plan = plan_sdpa(query.shape, key.shape, value.shape, enable_gqa)
    L, S = query.shape[-2], key.shape[-2]
    q = _np_4d(query, plan, plan.heads)
    k = _np_4d(key, plan, plan.kv_heads)
    v = _np_4d(value, plan, plan.kv_heads)
    kw = {}
    if attn_mask is not None:
        mask = np.asarray(attn_mask)
        check_mask_shape(mask.shape, plan, L, S)
        if mask.dtype != np.bool_ and mask.dtype.type not in (np.float32, np.float16):
            mask = mask.astype(np.float32) if mask.dtype.kind == "f" else mask
        if len(plan.batch) > 1:
            mask = np.broadcast_to(mask, plan.batch + (plan.heads, L, S)).reshape((-1, plan.heads, L, S))
        kw["mask"] = mask
    q, scale = _signed_scale(q, scale)
    if 0.0 < dropout_p < 1.0:
        kw.update(
            dropout_p=float(dropout_p),
            dropout_seed=int(np.random.randint(0, 2**63 - 1, dtype=np.int64)),
            dropout_offset=0,
        )
    out = np.empty((q.shape[0], plan.heads, L, value.shape[-1]), dtype=query.dtype)
    _sdpa.attention(
        q, k, v, out, scale=scale, causal=bool(is_causal), align="top_left", reference=query.dtype == np.float64,
        **kw,
    )
    if dropout_p == 1.0:
        out[...] = 0
    return out.reshape(plan.out_shape)


def scaled_dot_product_attention(
    query,
    key,
    value,
    attn_mask=None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: Optional[float] = None,
    enable_gqa: bool = False,
):
    """Drop-in for ``torch.nn.functional.scaled_dot_product_attention``.

    Takes torch tensors (CPU; float32, float16, bfloat16 on the fast path,
    float64 on the float64 oracle; any strides with a contiguous last axis,
    read in place) or NumPy arrays, and returns the caller's type. Dropout with
    torch tensors draws its seed from torch's default generator, so
    ``torch.manual_seed`` makes a run reproducible; the backward regenerates
    the same keep decisions.
    """
    _check_common(dropout_p, is_causal, attn_mask)
    if _is_torch(query):
        return _torch_sdpa(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa)
    return _np_sdpa(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa)


def default_scale(head_size: int) -> float:
    """1/sqrt(d): the scale used when none is given."""
    return 1.0 / math.sqrt(head_size)
