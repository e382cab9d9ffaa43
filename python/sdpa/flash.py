"""flash-attn's interface on sdpa's CPU kernels.

``flash_attn_func``, ``flash_attn_varlen_func`` and ``flash_attn_with_kvcache``
keep flash-attn's signatures, its [B, N, H, d] layout, its bottom-right causal
alignment (the last query sits at the last key) and its return values, so code
written for flash-attn runs on a CPU by changing one import:

    from sdpa import flash_attn_func   # was: from flash_attn import flash_attn_func

Beyond flash-attn: float32 as well as float16/bfloat16; ``sinks`` (a per-head
logit that joins the softmax's denominator); int8 KV caches (``k_scales``,
``v_scales``). Arguments whose feature the library does not have (rotary
embeddings, cache_batch_idx, cache_leftpad) raise a clear error rather than
being ignored. ``deterministic`` is accepted and always true: every result is
bitwise identical for every thread count.
"""

from __future__ import annotations

from typing import Optional, Tuple

import torch
from torch import Tensor

from . import _torch as ops
from ._arrays import Error


def _window(window_size: Tuple[int, int]) -> Tuple[int, int]:
    left, right = (int(x) for x in window_size)
    return (-1 if left < 0 else left), (-1 if right < 0 else right)


def _check_tensor(name: str, t) -> None:
    if not isinstance(t, torch.Tensor):
        raise Error(f"{name}: expected a torch.Tensor, got {type(t).__name__}")
    if t.device.type != "cpu":
        raise Error(f"{name}: expected a tensor on the CPU, got one on {t.device}")


def _unsupported(**kw) -> None:
    for name, value in kw.items():
        if value is not None:
            raise Error(f"{name}: expected None (not supported by sdpa), got {type(value).__name__}")


def flash_attn_func(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    dropout_p: float = 0.0,
    softmax_scale: Optional[float] = None,
    causal: bool = False,
    window_size: Tuple[int, int] = (-1, -1),
    softcap: float = 0.0,
    alibi_slopes: Optional[Tensor] = None,
    deterministic: bool = True,
    return_attn_probs: bool = False,
    *,
    sinks: Optional[Tensor] = None,
):
    """q [B, Sq, H, d], k [B, Sk, Hkv, d], v [B, Sk, Hkv, dv] -> out [B, Sq, H, dv].

    With return_attn_probs: (out, softmax_lse [B, H, Sq] float32, S_dmask
    [B, H, Sq, Sk]); S_dmask holds the softmax probabilities, negated where
    dropout dropped them (flash-attn's encoding; for testing only, it costs
    Sq·Sk memory).
    """
    for name, t in (("q", q), ("k", k), ("v", v)):
        _check_tensor(name, t)
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        raise Error(f"q: expected q, k, v of rank 4 ([B, N, H, d]), got ranks {q.dim()}, {k.dim()}, {v.dim()}")
    if not 0.0 <= dropout_p < 1.0:
        raise Error(f"dropout_p: expected a number in [0, 1), got {dropout_p}")
    left, right = _window(window_size)
    seed = ops.new_seed() if dropout_p > 0.0 else None
    out, lse, probs = ops.call(
        ops.attention_op, ops._attention_op_impl, (q, k, v, alibi_slopes, sinks),
        q, k, v, None, alibi_slopes, sinks, seed, "bshd",
        None if softmax_scale is None else float(softmax_scale),
        bool(causal), False, left, right, float(softcap), float(dropout_p), bool(return_attn_probs),
    )
    if not return_attn_probs:
        return out
    return out, lse, probs


def flash_attn_varlen_func(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    cu_seqlens_q: Tensor,
    cu_seqlens_k: Tensor,
    max_seqlen_q: int,
    max_seqlen_k: int,
    dropout_p: float = 0.0,
    softmax_scale: Optional[float] = None,
    causal: bool = False,
    window_size: Tuple[int, int] = (-1, -1),
    softcap: float = 0.0,
    alibi_slopes: Optional[Tensor] = None,
    deterministic: bool = True,
    return_attn_probs: bool = False,
    block_table: Optional[Tensor] = None,
    *,
    sinks: Optional[Tensor] = None,
):
    """Packed sequences: q [total_q, H, d], k [total_k, Hkv, d], v [total_k, Hkv, dv];
    sequence s has rows cu_seqlens_q[s]..cu_seqlens_q[s+1] (int32 [n+1]).

    Returns out [total_q, H, dv]; with return_attn_probs (out, softmax_lse
    [H, total_q], None): the probabilities of packed sequences are not formed.
    """
    for name, t in (("q", q), ("k", k), ("v", v), ("cu_seqlens_q", cu_seqlens_q), ("cu_seqlens_k", cu_seqlens_k)):
        _check_tensor(name, t)
    _unsupported(block_table=block_table)
    if not 0.0 <= dropout_p < 1.0:
        raise Error(f"dropout_p: expected a number in [0, 1), got {dropout_p}")
    left, right = _window(window_size)
    seed = ops.new_seed() if dropout_p > 0.0 else None
    out, lse = ops.call(
        ops.varlen_op, ops._varlen_op_impl, (q, k, v, alibi_slopes, sinks),
        q, k, v, cu_seqlens_q, cu_seqlens_k, int(max_seqlen_q), int(max_seqlen_k), alibi_slopes, sinks, seed,
        None if softmax_scale is None else float(softmax_scale), bool(causal), left, right, float(softcap),
        float(dropout_p),
    )
    if not return_attn_probs:
        return out
    return out, lse, None


def flash_attn_with_kvcache(
    q: Tensor,
    k_cache: Tensor,
    v_cache: Tensor,
    k: Optional[Tensor] = None,
    v: Optional[Tensor] = None,
    rotary_cos: Optional[Tensor] = None,
    rotary_sin: Optional[Tensor] = None,
    cache_seqlens=None,
    cache_batch_idx: Optional[Tensor] = None,
    cache_leftpad: Optional[Tensor] = None,
    block_table: Optional[Tensor] = None,
    softmax_scale: Optional[float] = None,
    causal: bool = False,
    window_size: Tuple[int, int] = (-1, -1),
    softcap: float = 0.0,
    rotary_interleaved: bool = True,
    alibi_slopes: Optional[Tensor] = None,
    num_splits: int = 0,
    return_softmax_lse: bool = False,
    *,
    sinks: Optional[Tensor] = None,
    k_scales: Optional[Tensor] = None,
    v_scales: Optional[Tensor] = None,
):
    """Decode against a KV cache, appending k/v in place first.

    q [B, Nq, H, d]; k_cache, v_cache [B, capacity, Hkv, d] or, with
    block_table [B, max_pages] (int32), pages [num_pages, page_size, Hkv, d];
    k, v [B, n_new, Hkv, d] are written at rows cache_seqlens[b].. (the caller
    advances cache_seqlens); cache_seqlens is an int or int32 [B] (None: the
    whole capacity). The queries attend to cache_seqlens[b] + n_new keys,
    causal bottom-right. Returns out [B, Nq, H, dv] (and softmax_lse [B, H, Nq]).
    int8 caches: k_cache/v_cache int8 with k_scales/v_scales [..., d / G].
    num_splits is chosen by the library (split-KV decode).
    """
    for name, t in (("q", q), ("k_cache", k_cache), ("v_cache", v_cache)):
        _check_tensor(name, t)
    _unsupported(rotary_cos=rotary_cos, rotary_sin=rotary_sin, cache_batch_idx=cache_batch_idx,
                 cache_leftpad=cache_leftpad)
    if (k is None) != (v is None):
        raise Error(f"k, v: expected both or neither, got k {'unset' if k is None else 'set'} and v "
                    f"{'unset' if v is None else 'set'}")
    B = q.shape[0]
    if cache_seqlens is None:
        if block_table is not None:
            raise Error("cache_seqlens: expected the lengths of the sequences with a block_table, got None")
        # The whole capacity, less room for the keys appended now.
        n = k_cache.shape[1] - (0 if k is None else k.shape[1])
        cache_seqlens = torch.full((B,), n, dtype=torch.int32)
    elif isinstance(cache_seqlens, int):
        cache_seqlens = torch.full((B,), cache_seqlens, dtype=torch.int32)
    left, right = _window(window_size)
    out, lse = ops.call(
        ops.kvcache_op, ops._kvcache_op_impl, (q, k_cache, v_cache, k, v),
        q, k_cache, v_cache, cache_seqlens, k, v, block_table, alibi_slopes, sinks, k_scales, v_scales,
        None if softmax_scale is None else float(softmax_scale), bool(causal), left, right, float(softcap),
    )
    return (out, lse) if return_softmax_lse else out


def flash_attn_qkvpacked_func(qkv: Tensor, dropout_p: float = 0.0, softmax_scale: Optional[float] = None,
                              causal: bool = False, window_size: Tuple[int, int] = (-1, -1), softcap: float = 0.0,
                              alibi_slopes: Optional[Tensor] = None, deterministic: bool = True,
                              return_attn_probs: bool = False, *, sinks: Optional[Tensor] = None):
    """qkv [B, N, 3, H, d]: flash_attn_func on its three views (no copy)."""
    _check_tensor("qkv", qkv)
    if qkv.dim() != 5 or qkv.shape[2] != 3:
        raise Error(f"qkv: expected shape [B, N, 3, H, d], got {list(qkv.shape)}")
    return flash_attn_func(qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2], dropout_p, softmax_scale, causal, window_size,
                           softcap, alibi_slopes, deterministic, return_attn_probs, sinks=sinks)


def flash_attn_kvpacked_func(q: Tensor, kv: Tensor, dropout_p: float = 0.0, softmax_scale: Optional[float] = None,
                             causal: bool = False, window_size: Tuple[int, int] = (-1, -1), softcap: float = 0.0,
                             alibi_slopes: Optional[Tensor] = None, deterministic: bool = True,
                             return_attn_probs: bool = False, *, sinks: Optional[Tensor] = None):
    """kv [B, Sk, 2, Hkv, d]: flash_attn_func on its two views (no copy)."""
    _check_tensor("kv", kv)
    if kv.dim() != 5 or kv.shape[2] != 2:
        raise Error(f"kv: expected shape [B, Sk, 2, Hkv, d], got {list(kv.shape)}")
    return flash_attn_func(q, kv[:, :, 0], kv[:, :, 1], dropout_p, softmax_scale, causal, window_size, softcap,
                           alibi_slopes, deterministic, return_attn_probs, sinks=sinks)


def flash_attn_varlen_qkvpacked_func(qkv: Tensor, cu_seqlens: Tensor, max_seqlen: int, dropout_p: float = 0.0,
                                     softmax_scale: Optional[float] = None, causal: bool = False,
                                     window_size: Tuple[int, int] = (-1, -1), softcap: float = 0.0,
                                     alibi_slopes: Optional[Tensor] = None, deterministic: bool = True,
                                     return_attn_probs: bool = False, *, sinks: Optional[Tensor] = None):
    """qkv [total, 3, H, d]: flash_attn_varlen_func on its three views (no copy)."""
    _check_tensor("qkv", qkv)
    if qkv.dim() != 4 or qkv.shape[1] != 3:
        raise Error(f"qkv: expected shape [total, 3, H, d], got {list(qkv.shape)}")
    return flash_attn_varlen_func(qkv[:, 0], qkv[:, 1], qkv[:, 2], cu_seqlens, cu_seqlens, max_seqlen, max_seqlen,
                                  dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes, deterministic,
                                  return_attn_probs, sinks=sinks)


def flash_attn_varlen_kvpacked_func(q: Tensor, kv: Tensor, cu_seqlens_q: Tensor, cu_seqlens_k: Tensor,
                                    max_seqlen_q: int, max_seqlen_k: int, dropout_p: float = 0.0,
                                    softmax_scale: Optional[float] = None, causal: bool = False,
                                    window_size: Tuple[int, int] = (-1, -1), softcap: float = 0.0,
                                    alibi_slopes: Optional[Tensor] = None, deterministic: bool = True,
                                    return_attn_probs: bool = False, *, sinks: Optional[Tensor] = None):
    """kv [total_k, 2, Hkv, d]: flash_attn_varlen_func on its two views (no copy)."""
    _check_tensor("kv", kv)
    if kv.dim() != 4 or kv.shape[1] != 2:
        raise Error(f"kv: expected shape [total_k, 2, Hkv, d], got {list(kv.shape)}")
    return flash_attn_varlen_func(q, kv[:, 0], kv[:, 1], cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                                  dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes, deterministic,
                                  return_attn_probs, sinks=sinks)
