"""The torch operators: forward and backward of each attention call as a
``torch.library.custom_op`` pair, with fake (meta) functions for shapes and
``register_autograd`` for the gradients, so ``loss.backward()`` works and
``torch.compile(fullgraph=True)`` traces through them.

Each operator hands the caller's tensors to the C++ library as they are
(through DLPack: no copy, any strides with a contiguous last axis) and
allocates its outputs with torch. float32, float16 and bfloat16 tensors run the
fast path; float64 tensors run the library's float64 oracle (exact, slow: for
``torch.autograd.gradcheck`` and reference runs).
"""

from __future__ import annotations

from typing import List, Optional, Tuple

import torch
from torch import Tensor
from torch.utils.dlpack import to_dlpack

from . import _sdpa

_LIB = "sdpa"


def _last_contiguous(t: Optional[Tensor]) -> Optional[Tensor]:
    """The library reads rows in place; only a strided last axis is copied."""
    if t is None:
        return None
    if t.dim() > 0 and t.size(-1) > 1 and t.stride(-1) != 1:
        return t.contiguous()
    return t


def _capsule(x):
    # detach (a view): DLPack refuses tensors that require grad.
    if not isinstance(x, Tensor):
        return x
    return to_dlpack(x.detach() if x.requires_grad else x)


def _call(fn, *args, **kwargs):
    """Calls the extension with every tensor as a DLPack capsule over its
    memory (no copy, and a few microseconds less per tensor than the
    __dlpack__ protocol's Python path); keywords that are None are left out."""
    return fn(*[_capsule(a) for a in args], **{k: _capsule(v) for k, v in kwargs.items() if v is not None})


def _bhsd(t: Tensor, layout: str) -> Tensor:
    return t if layout == "bhsd" else t.transpose(1, 2)


def _lse_dtype(q: Tensor) -> torch.dtype:
    return torch.float64 if q.dtype == torch.float64 else torch.float32


def _mask_arg(mask: Optional[Tensor], q: Tensor) -> Optional[Tensor]:
    # The library takes bool, float32 and float16 masks; the oracle's float64
    # path and bfloat16 masks are handed over as float32.
    if mask is None or mask.dtype in (torch.bool, torch.float32, torch.float16):
        return _last_contiguous(mask)
    if mask.dtype in (torch.bfloat16, torch.float64):
        return mask.to(torch.float32)
    return mask  # the library names the dtype it refuses


def _options(
    q: Tensor,
    scale: Optional[float],
    causal: bool,
    top_left: bool,
    window_left: int,
    window_right: int,
    softcap: float,
    dropout_p: float,
    seed: Optional[Tensor],
) -> dict:
    # Only what differs from the library's defaults: fewer keywords to parse.
    kw = {"threads": torch.get_num_threads()}
    if scale is not None:
        kw["scale"] = scale
    if causal:
        kw["causal"] = True
    if top_left:
        kw["align"] = "top_left"
    if window_left != -1:
        kw["window_left"] = window_left
    if window_right != -1:
        kw["window_right"] = window_right
    if softcap != 0.0:
        kw["softcap"] = softcap
    if q.dtype == torch.float64:
        kw["reference"] = True
    if dropout_p > 0.0:
        if seed is None:
            raise RuntimeError("dropout_p > 0 needs a seed tensor")
        s = seed.tolist()
        kw.update(dropout_p=dropout_p, dropout_seed=int(s[0]) & (2**64 - 1), dropout_offset=int(s[1]) & (2**32 - 1))
    elif dropout_p != 0.0:
        kw.update(dropout_p=dropout_p)  # refused by the library, naming dropout_p
    return kw


def call(op, impl, tensors, *args):
    """Runs an operator: through torch's dispatcher (the custom op, with its
    autograd and fake kernels) when torch.compile is tracing or a gradient may
    be needed, else its implementation directly, which saves the dispatcher's
    tens of microseconds per call (inference, decode)."""
    if torch.compiler.is_compiling() or any(
        t is not None and (type(t) is not Tensor or (t.requires_grad and torch.is_grad_enabled())) for t in tensors
    ):
        return op(*args)
    return impl(*args)


def new_seed() -> Tensor:
    """A (seed, offset) pair drawn from torch's default generator, so that
    ``torch.manual_seed`` makes dropout reproducible."""
    return torch.randint(-(2**63), 2**63 - 1, (2,), dtype=torch.int64)


# ---------------------------------------------------------------------------
# Dense attention: q [B, H, L, E] ("bhsd", torch's layout) or [B, L, H, E]
# ("bshd", flash-attn's), k, v with Hkv heads in the same layout.


def _attention_op_impl(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Optional[Tensor],
    alibi_slopes: Optional[Tensor],
    sinks: Optional[Tensor],
    seed: Optional[Tensor],
    layout: str,
    scale: Optional[float],
    causal: bool,
    top_left: bool,
    window_left: int,
    window_right: int,
    softcap: float,
    dropout_p: float,
    return_probs: bool,
) -> Tuple[Tensor, Tensor, Tensor]:
    q, k, v = (_last_contiguous(x) for x in (q, k, v))
    qv, kv, vv = (_bhsd(x, layout) for x in (q, k, v))
    B, H, L, _ = qv.shape
    S, Ev = kv.shape[2], vv.shape[3]
    out = q.new_empty((B, H, L, Ev) if layout == "bhsd" else (B, L, H, Ev))
    lse = torch.empty((B, H, L), dtype=_lse_dtype(q))
    probs = torch.empty((B, H, L, S) if return_probs else (0,), dtype=_lse_dtype(q))
    kw = _options(q, scale, causal, top_left, window_left, window_right, softcap, dropout_p, seed)
    # With dropout, the probabilities come back as flash-attn's S_dmask does:
    # negated where the key was dropped.
    keep = torch.empty((B, H, L, S), dtype=torch.bool) if return_probs and dropout_p > 0.0 else None
    _call(_sdpa.attention,
        qv,
        kv,
        vv,
        _bhsd(out, layout),
        lse=lse,
        probs=probs if return_probs else None,
        dropout_mask=keep,
        mask=_mask_arg(mask, q),
        alibi_slopes=_last_contiguous(alibi_slopes),
        sinks=_last_contiguous(sinks),
        **kw,
    )
    if keep is not None:
        probs = torch.where(keep, probs, -probs)
    return out, lse, probs


attention_op = torch.library.custom_op(
    f"{_LIB}::attention", mutates_args=(), device_types="cpu"
)(_attention_op_impl)


@attention_op.register_fake
def _(q, k, v, mask, alibi_slopes, sinks, seed, layout, scale, causal, top_left, wl, wr, softcap, p, return_probs):
    qv, kv, vv = (_bhsd(x, layout) for x in (q, k, v))
    B, H, L, _ = qv.shape
    S, Ev = kv.shape[2], vv.shape[3]
    out = q.new_empty((B, H, L, Ev) if layout == "bhsd" else (B, L, H, Ev))
    lse = q.new_empty((B, H, L), dtype=_lse_dtype(q))
    probs = q.new_empty((B, H, L, S) if return_probs else (0,), dtype=_lse_dtype(q))
    return out, lse, probs


def _attention_backward_op_impl(
    d_out: Tensor,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    out: Tensor,
    lse: Tensor,
    mask: Optional[Tensor],
    alibi_slopes: Optional[Tensor],
    sinks: Optional[Tensor],
    seed: Optional[Tensor],
    layout: str,
    scale: Optional[float],
    causal: bool,
    top_left: bool,
    window_left: int,
    window_right: int,
    softcap: float,
    dropout_p: float,
) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
    d_out, q, k, v, out = (_last_contiguous(x) for x in (d_out, q, k, v, out))
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    dsinks = torch.empty(sinks.shape if sinks is not None else (0,), dtype=torch.float32)
    kw = _options(q, scale, causal, top_left, window_left, window_right, softcap, dropout_p, seed)
    _call(_sdpa.attention_backward,
        _bhsd(q, layout),
        _bhsd(k, layout),
        _bhsd(v, layout),
        _bhsd(out, layout),
        lse,
        _bhsd(d_out, layout),
        _bhsd(dq, layout),
        _bhsd(dk, layout),
        _bhsd(dv, layout),
        dsinks if sinks is not None else None,
        mask=_mask_arg(mask, q),
        alibi_slopes=_last_contiguous(alibi_slopes),
        sinks=_last_contiguous(sinks),
        **kw,
    )
    return dq, dk, dv, dsinks


attention_backward_op = torch.library.custom_op(
    f"{_LIB}::attention_backward", mutates_args=(), device_types="cpu"
)(_attention_backward_op_impl)


@attention_backward_op.register_fake
def _(d_out, q, k, v, out, lse, mask, alibi_slopes, sinks, seed, layout, scale, causal, top_left, wl, wr, sc, p):
    dsinks = q.new_empty(sinks.shape if sinks is not None else (0,), dtype=torch.float32)
    return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v), dsinks


def _attention_setup(ctx, inputs, output):
    q, k, v, mask, alibi_slopes, sinks, seed = inputs[:7]
    out, lse, probs = output
    ctx.save_for_backward(q, k, v, out, lse, mask, alibi_slopes, sinks, seed)
    ctx.options = inputs[7:15]  # layout .. dropout_p
    ctx.mark_non_differentiable(lse, probs)


def _refuse_mask_grad(ctx, index: int) -> None:
    if ctx.needs_input_grad[index]:
        raise RuntimeError(
            "attn_mask: the gradient of a float mask is not computed by sdpa (the mask is a constant of the "
            "call); detach it, or express the bias as alibi_slopes"
        )


def _attention_backward(ctx, d_out, d_lse, d_probs):
    q, k, v, out, lse, mask, alibi_slopes, sinks, seed = ctx.saved_tensors
    _refuse_mask_grad(ctx, 3)
    dq, dk, dv, dsinks = attention_backward_op(d_out, q, k, v, out, lse, mask, alibi_slopes, sinks, seed, *ctx.options)
    grads: List[Optional[Tensor]] = [dq, dk, dv, None, None, dsinks if sinks is not None else None]
    return tuple(grads + [None] * 10)


attention_op.register_autograd(_attention_backward, setup_context=_attention_setup)


# ---------------------------------------------------------------------------
# Packed variable-length batches: q [total_q, H, E], k, v [total_k, Hkv, E].


def _varlen_op_impl(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    cu_seqlens_q: Tensor,
    cu_seqlens_k: Tensor,
    max_seqlen_q: int,
    max_seqlen_k: int,
    alibi_slopes: Optional[Tensor],
    sinks: Optional[Tensor],
    seed: Optional[Tensor],
    scale: Optional[float],
    causal: bool,
    window_left: int,
    window_right: int,
    softcap: float,
    dropout_p: float,
) -> Tuple[Tensor, Tensor]:
    q, k, v = (_last_contiguous(x) for x in (q, k, v))
    out = q.new_empty(q.shape[:2] + (v.shape[2],))
    lse = torch.empty((q.shape[1], q.shape[0]), dtype=_lse_dtype(q))
    kw = _options(q, scale, causal, False, window_left, window_right, softcap, dropout_p, seed)
    _call(_sdpa.attention_varlen,
        q, k, v, out, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
        lse=lse, alibi_slopes=_last_contiguous(alibi_slopes), sinks=_last_contiguous(sinks), **kw,
    )
    return out, lse


varlen_op = torch.library.custom_op(
    f"{_LIB}::attention_varlen", mutates_args=(), device_types="cpu"
)(_varlen_op_impl)


@varlen_op.register_fake
def _(q, k, v, cu_q, cu_k, max_q, max_k, alibi_slopes, sinks, seed, scale, causal, wl, wr, softcap, p):
    return q.new_empty(q.shape[:2] + (v.shape[2],)), q.new_empty((q.shape[1], q.shape[0]), dtype=_lse_dtype(q))


def _varlen_backward_op_impl(
    d_out: Tensor,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    out: Tensor,
    lse: Tensor,
    cu_seqlens_q: Tensor,
    cu_seqlens_k: Tensor,
    max_seqlen_q: int,
    max_seqlen_k: int,
    alibi_slopes: Optional[Tensor],
    sinks: Optional[Tensor],
    seed: Optional[Tensor],
    scale: Optional[float],
    causal: bool,
    window_left: int,
    window_right: int,
    softcap: float,
    dropout_p: float,
) -> Tuple[Tensor, Tensor, Tensor]:
    d_out, q, k, v, out = (_last_contiguous(x) for x in (d_out, q, k, v, out))
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    kw = _options(q, scale, causal, False, window_left, window_right, softcap, dropout_p, seed)
    _call(_sdpa.attention_varlen_backward,
        q, k, v, out, lse, d_out, dq, dk, dv, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
        alibi_slopes=_last_contiguous(alibi_slopes), sinks=_last_contiguous(sinks), **kw,
    )
    return dq, dk, dv


varlen_backward_op = torch.library.custom_op(
    f"{_LIB}::attention_varlen_backward", mutates_args=(), device_types="cpu"
)(_varlen_backward_op_impl)


@varlen_backward_op.register_fake
def _(d_out, q, k, v, out, lse, cu_q, cu_k, mq, mk, alibi, sinks, seed, scale, causal, wl, wr, sc, p):
    return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)


def _varlen_setup(ctx, inputs, output):
    q, k, v, cu_q, cu_k, max_q, max_k, alibi_slopes, sinks, seed = inputs[:10]
    out, lse = output
    ctx.save_for_backward(q, k, v, out, lse, cu_q, cu_k, alibi_slopes, sinks, seed)
    ctx.max_seqlens = (max_q, max_k)
    ctx.options = inputs[10:]
    ctx.mark_non_differentiable(lse)


def _varlen_backward(ctx, d_out, d_lse):
    q, k, v, out, lse, cu_q, cu_k, alibi_slopes, sinks, seed = ctx.saved_tensors
    if sinks is not None and ctx.needs_input_grad[8]:
        raise RuntimeError("sinks: their gradient is not available with packed sequences; detach them")
    dq, dk, dv = varlen_backward_op(
        d_out, q, k, v, out, lse, cu_q, cu_k, *ctx.max_seqlens, alibi_slopes, sinks, seed, *ctx.options
    )
    return (dq, dk, dv) + (None,) * 13


varlen_op.register_autograd(_varlen_backward, setup_context=_varlen_setup)


# ---------------------------------------------------------------------------
# KV cache (dense or paged): appends k_new/v_new in place, then attends.
# Inference only (no gradient).


def _kvcache_op_impl(
    q: Tensor,
    k_cache: Tensor,
    v_cache: Tensor,
    cache_seqlens: Tensor,
    k_new: Optional[Tensor],
    v_new: Optional[Tensor],
    block_table: Optional[Tensor],
    alibi_slopes: Optional[Tensor],
    sinks: Optional[Tensor],
    k_scales: Optional[Tensor],
    v_scales: Optional[Tensor],
    scale: Optional[float],
    causal: bool,
    window_left: int,
    window_right: int,
    softcap: float,
) -> Tuple[Tensor, Tensor]:
    # flash-attn's layout: q [B, Nq, H, d], k_new [B, n, Hkv, d]; the cache
    # [B, capacity, Hkv, d], or pages [num_pages, page_size, Hkv, d].
    q = _last_contiguous(q)
    B, Nq, H, _ = q.shape
    dv = v_cache.shape[-1]
    out = q.new_empty((B, Nq, H, dv))
    lse = torch.empty((B, H, Nq), dtype=_lse_dtype(q))
    kw = _options(q, scale, causal, False, window_left, window_right, softcap, 0.0, None)
    kw.update(lse=lse, alibi_slopes=_last_contiguous(alibi_slopes), sinks=_last_contiguous(sinks),
              k_scales=k_scales, v_scales=v_scales)
    kn = None if k_new is None else _last_contiguous(k_new).transpose(1, 2)
    vn = None if v_new is None else _last_contiguous(v_new).transpose(1, 2)
    if block_table is None:
        if k_scales is not None:
            kw["k_scales"] = k_scales.transpose(1, 2)
        if v_scales is not None:
            kw["v_scales"] = v_scales.transpose(1, 2)
        _call(_sdpa.attention_kvcache,
            q.transpose(1, 2), k_cache.transpose(1, 2), v_cache.transpose(1, 2), cache_seqlens, kn, vn,
            out.transpose(1, 2), **kw,
        )
    else:
        _call(_sdpa.attention_paged,
            q.transpose(1, 2), k_cache, v_cache, block_table, cache_seqlens, kn, vn, out.transpose(1, 2), **kw
        )
    return out, lse


kvcache_op = torch.library.custom_op(
    f"{_LIB}::attention_kvcache", mutates_args=("k_cache", "v_cache"), device_types="cpu"
)(_kvcache_op_impl)


@kvcache_op.register_fake
def _(q, k_cache, v_cache, cache_seqlens, k_new, v_new, block_table, alibi, sinks, ks, vs, scale, causal, wl, wr, sc):
    B, Nq, H, _ = q.shape
    return q.new_empty((B, Nq, H, v_cache.shape[-1])), q.new_empty((B, H, Nq), dtype=_lse_dtype(q))
