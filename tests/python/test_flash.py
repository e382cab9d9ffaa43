"""sdpa's flash-attn drop-ins against a plain float64 implementation of
flash-attn's semantics: [B, N, H, d] layout, bottom-right causal alignment,
windows, softcap, ALiBi, sinks, GQA, LSE; packed sequences; KV caches."""

import math
import random

import pytest

torch = pytest.importorskip("torch")

import sdpa
from conftest import assert_policy


def reference(q, k, v, causal=False, window=(-1, -1), softcap=0.0, alibi=None, sinks=None, scale=None):
    """flash-attn's forward, written out: returns out [B, Sq, H, dv], lse [B, H, Sq]."""
    B, Sq, H, d = q.shape
    Sk, Hkv = k.shape[1], k.shape[2]
    k = k.repeat_interleave(H // Hkv, dim=2)
    v = v.repeat_interleave(H // Hkv, dim=2)
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    s = torch.einsum("bqhd,bkhd->bhqk", q, k) * scale
    if softcap > 0:
        s = softcap * torch.tanh(s / softcap)
    i = torch.arange(Sq)[:, None] + (Sk - Sq)
    j = torch.arange(Sk)[None, :]
    if alibi is not None:
        slopes = alibi if alibi.dim() == 2 else alibi[None].expand(B, H)
        s = s - slopes[:, :, None, None].to(s.dtype) * (i - j).abs()
    visible = torch.ones(Sq, Sk, dtype=torch.bool)
    if causal:
        visible &= j <= i
    left, right = window
    if left >= 0:
        visible &= j >= i - left
    if right >= 0:
        visible &= j <= i + right
    s = s.masked_fill(~visible, float("-inf"))
    if sinks is not None:
        s = torch.cat([s, sinks.to(s.dtype)[None, :, None, None].expand(B, H, Sq, 1)], dim=-1)
    lse = torch.logsumexp(s, dim=-1)
    p = torch.exp(s - lse[..., None]).nan_to_num(0.0)[..., :Sk]
    out = torch.einsum("bhqk,bkhd->bqhd", p, v)
    return out, lse


def draw(rng, gen, dtype):
    B = rng.choice([1, 2])
    Hkv = rng.choice([1, 2])
    H = Hkv * rng.choice([1, 3])
    Sq, Sk = rng.randint(1, 60), rng.randint(1, 60)
    d = rng.choice([16, 32, 40, 64])
    q = torch.randn(B, Sq, H, d, generator=gen, dtype=torch.float64).to(dtype)
    k = torch.randn(B, Sk, Hkv, d, generator=gen, dtype=torch.float64).to(dtype)
    v = torch.randn(B, Sk, Hkv, d, generator=gen, dtype=torch.float64).to(dtype)
    opts = dict(
        causal=rng.random() < 0.5,
        window=rng.choice([(-1, -1), (-1, -1), (8, 0), (5, 7)]),
        softcap=rng.choice([0.0, 0.0, 5.0]),
        alibi=torch.rand(H, generator=gen) if rng.random() < 0.3 else None,
        sinks=torch.randn(H, generator=gen) if rng.random() < 0.3 else None,
    )
    return q, k, v, opts


def call(q, k, v, opts, **extra):
    return sdpa.flash_attn_func(q, k, v, causal=opts["causal"], window_size=opts["window"], softcap=opts["softcap"],
                                alibi_slopes=opts["alibi"], sinks=opts["sinks"], **extra)


@pytest.mark.parametrize("seed", range(30))
def test_flash_attn_func_forward(seed):
    rng = random.Random(seed)
    gen = torch.Generator().manual_seed(seed)
    dtype = [torch.float32, torch.bfloat16, torch.float16][seed % 3]
    q, k, v, opts = draw(rng, gen, dtype)
    out, lse, probs = call(q, k, v, opts, return_attn_probs=True)
    want, want_lse = reference(q.double(), k.double(), v.double(), **opts)
    plain, _ = reference(q, k, v, **opts) if dtype == torch.float32 else reference(q.float(), k.float(), v.float(),
                                                                                    **opts)
    assert out.shape == q.shape[:3] + (v.shape[3],) and out.dtype == dtype and out.is_contiguous()
    assert_policy(out, want, plain.to(dtype), dtype, f"case {seed}")
    finite = torch.isfinite(want_lse)
    assert torch.equal(torch.isfinite(lse), finite)
    torch.testing.assert_close(lse[finite].double(), want_lse[finite], atol=1e-4, rtol=1e-4)
    assert probs.shape == (q.shape[0], q.shape[2], q.shape[1], k.shape[1])


@pytest.mark.parametrize("seed", range(10))
def test_flash_attn_func_gradients(seed):
    rng = random.Random(500 + seed)
    gen = torch.Generator().manual_seed(seed)
    q, k, v, opts = draw(rng, gen, torch.float32)
    d_out = torch.randn(q.shape[:3] + (v.shape[3],), generator=gen)

    def grads(fn, dtype):
        xs = [x.detach().to(dtype).clone().requires_grad_() for x in (q, k, v)]
        out = fn(*xs)
        out = out[0] if isinstance(out, tuple) else out
        out.backward(d_out.to(dtype))
        return [x.grad for x in xs]

    got = grads(lambda q, k, v: call(q, k, v, opts), torch.float32)
    oracle = grads(lambda q, k, v: reference(q, k, v, **opts), torch.float64)
    plain = grads(lambda q, k, v: reference(q, k, v, **opts), torch.float32)
    for name, g, o, p in zip("qkv", got, oracle, plain):
        assert_policy(g, o, p, torch.float32, f"d{name}, case {seed}")


def test_sinks_gradient():
    gen = torch.Generator().manual_seed(4)
    q = torch.randn(1, 5, 2, 8, generator=gen, dtype=torch.float64, requires_grad=True)
    k = torch.randn(1, 6, 2, 8, generator=gen, dtype=torch.float64, requires_grad=True)
    v = torch.randn(1, 6, 2, 8, generator=gen, dtype=torch.float64, requires_grad=True)
    sinks = torch.randn(2, generator=gen, dtype=torch.float32, requires_grad=True)
    out = sdpa.flash_attn_func(q, k, v, causal=True, sinks=sinks)
    out.sum().backward()
    s64 = sinks.detach().double().requires_grad_()
    ref, _ = reference(q.detach(), k.detach(), v.detach(), causal=True, sinks=s64)
    ref.sum().backward()
    torch.testing.assert_close(sinks.grad.double(), s64.grad, atol=1e-5, rtol=1e-5)


def test_flash_attn_func_dropout_probs_mark_dropped():
    gen = torch.Generator().manual_seed(8)
    q, k, v = (torch.randn(1, 16, 2, 16, generator=gen) for _ in range(3))
    torch.manual_seed(0)
    out, lse, s_dmask = sdpa.flash_attn_func(q, k, v, dropout_p=0.25, return_attn_probs=True)
    torch.manual_seed(0)
    again = sdpa.flash_attn_func(q, k, v, dropout_p=0.25)
    assert torch.equal(out, again)
    dropped = (s_dmask < 0).float().mean().item()
    assert 0.15 < dropped < 0.35
    # out = (P * keep / (1 - p)) V, from the returned encoding
    keep = s_dmask > 0
    p = s_dmask.abs() * keep / 0.75
    want = torch.einsum("bhqk,bkhd->bqhd", p, v)
    torch.testing.assert_close(out, want, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("causal", [False, True])
def test_varlen_equals_each_sequence(causal):
    gen = torch.Generator().manual_seed(12)
    lens_q, lens_k = [5, 1, 17, 9], [7, 3, 17, 20]
    H, Hkv, d = 4, 2, 32
    qs = [torch.randn(n, H, d, generator=gen) for n in lens_q]
    ks = [torch.randn(n, Hkv, d, generator=gen) for n in lens_k]
    vs = [torch.randn(n, Hkv, d, generator=gen) for n in lens_k]
    cu = lambda lens: torch.tensor([0] + list(torch.tensor(lens).cumsum(0)), dtype=torch.int32)
    q, k, v = (torch.cat(x).requires_grad_() for x in (qs, ks, vs))
    out, lse, none = sdpa.flash_attn_varlen_func(q, k, v, cu(lens_q), cu(lens_k), max(lens_q), max(lens_k),
                                                 causal=causal, return_attn_probs=True)
    assert none is None and lse.shape == (H, sum(lens_q))
    rows = 0
    for qi, ki, vi in zip(qs, ks, vs):
        want, want_lse = reference(qi[None].double(), ki[None].double(), vi[None].double(), causal=causal)
        torch.testing.assert_close(out[rows:rows + len(qi)].double(), want[0], atol=2e-6, rtol=1e-5)
        rows += len(qi)
    out.sum().backward()
    q2, k2, v2 = (torch.cat(x).double().requires_grad_() for x in (qs, ks, vs))
    total, r, c = 0, 0, 0
    for nq, nk in zip(lens_q, lens_k):
        o, _ = reference(q2[r:r + nq][None], k2[c:c + nk][None], v2[c:c + nk][None], causal=causal)
        total = total + o.sum()
        r, c = r + nq, c + nk
    total.backward()
    for a, b in ((q, q2), (k, k2), (v, v2)):
        torch.testing.assert_close(a.grad.double(), b.grad, atol=2e-5, rtol=1e-4)


def test_with_kvcache_appends_and_attends():
    gen = torch.Generator().manual_seed(21)
    B, cap, H, Hkv, d = 3, 64, 4, 2, 32
    k_cache = torch.randn(B, cap, Hkv, d, generator=gen)
    v_cache = torch.randn(B, cap, Hkv, d, generator=gen)
    seqlens = torch.tensor([10, 0, 40], dtype=torch.int32)
    q = torch.randn(B, 2, H, d, generator=gen)
    k_new = torch.randn(B, 2, Hkv, d, generator=gen)
    v_new = torch.randn(B, 2, Hkv, d, generator=gen)
    before = k_cache.clone()
    out, lse = sdpa.flash_attn_with_kvcache(q, k_cache, v_cache, k_new, v_new, cache_seqlens=seqlens, causal=True,
                                            return_softmax_lse=True)
    for b in range(B):
        n = int(seqlens[b])
        assert torch.equal(k_cache[b, n:n + 2], k_new[b])
        assert torch.equal(k_cache[b, :n], before[b, :n])
        assert torch.equal(k_cache[b, n + 2:], before[b, n + 2:])
        want, want_lse = reference(q[b:b + 1].double(), k_cache[b:b + 1, :n + 2].double(),
                                   v_cache[b:b + 1, :n + 2].double(), causal=True)
        torch.testing.assert_close(out[b:b + 1].double(), want, atol=2e-6, rtol=1e-5)
        torch.testing.assert_close(lse[b:b + 1].double(), want_lse, atol=1e-5, rtol=1e-5)


def test_with_kvcache_paged_equals_dense():
    gen = torch.Generator().manual_seed(22)
    B, H, Hkv, d, page = 2, 4, 4, 16, 8
    seqlens = torch.tensor([13, 30], dtype=torch.int32)
    num_pages = 10
    k_pages = torch.randn(num_pages, page, Hkv, d, generator=gen)
    v_pages = torch.randn(num_pages, page, Hkv, d, generator=gen)
    table = torch.tensor([[7, 2, 0, 0], [1, 9, 4, 5]], dtype=torch.int32)
    q = torch.randn(B, 1, H, d, generator=gen)
    out = sdpa.flash_attn_with_kvcache(q, k_pages, v_pages, cache_seqlens=seqlens, block_table=table)
    for b in range(B):
        n = int(seqlens[b])
        k = k_pages[table[b]].reshape(-1, Hkv, d)[:n]
        v = v_pages[table[b]].reshape(-1, Hkv, d)[:n]
        want, _ = reference(q[b:b + 1].double(), k[None].double(), v[None].double())
        torch.testing.assert_close(out[b:b + 1].double(), want, atol=2e-6, rtol=1e-5)


def test_unsupported_arguments_are_refused():
    q = torch.randn(1, 4, 2, 16)
    with pytest.raises(RuntimeError, match="rotary_cos"):
        sdpa.flash_attn_with_kvcache(q, q.clone(), q.clone(), rotary_cos=torch.ones(4, 8), cache_seqlens=2)
    with pytest.raises(RuntimeError, match="block_table"):
        cu = torch.tensor([0, 4], dtype=torch.int32)
        sdpa.flash_attn_varlen_func(q[0], q[0], q[0], cu, cu, 4, 4, block_table=torch.zeros(1, 1, dtype=torch.int32))
    with pytest.raises(RuntimeError, match="rank 4"):
        sdpa.flash_attn_func(q[0], q[0], q[0])
    with pytest.raises(RuntimeError, match="softcap"):
        sdpa.flash_attn_func(q, q, q, softcap=-1.0)


def test_flash_attn_func_compiles():
    gen = torch.Generator().manual_seed(30)
    q, k, v = (torch.randn(2, 16, 4, 32, generator=gen, requires_grad=True) for _ in range(3))
    f = lambda q, k, v: sdpa.flash_attn_func(q, k, v, causal=True, window_size=(6, 0)).square().mean()
    loss = torch.compile(f, fullgraph=True)(q, k, v)
    loss.backward()
    g = [x.grad.clone() for x in (q, k, v)]
    for x in (q, k, v):
        x.grad = None
    eager = f(q, k, v)
    eager.backward()
    torch.testing.assert_close(loss, eager)
    for a, x in zip(g, (q, k, v)):
        torch.testing.assert_close(a, x.grad)


def test_packed_variants_are_views_of_the_same_call():
    gen = torch.Generator().manual_seed(40)
    qkv = torch.randn(2, 12, 3, 4, 16, generator=gen, requires_grad=True)
    out = sdpa.flash_attn_qkvpacked_func(qkv, causal=True)
    want = sdpa.flash_attn_func(qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2], causal=True)
    assert torch.equal(out, want)
    seen = dict(sdpa._sdpa._last_views())
    assert seen["q"] == qkv.data_ptr()  # read in place: q is qkv[:, :, 0]
    out.sum().backward()
    assert qkv.grad.shape == qkv.shape and torch.isfinite(qkv.grad).all()
    q = torch.randn(2, 12, 4, 16, generator=gen)
    kv = torch.randn(2, 15, 2, 2, 16, generator=gen)
    torch.testing.assert_close(sdpa.flash_attn_kvpacked_func(q, kv), sdpa.flash_attn_func(q, kv[:, :, 0], kv[:, :, 1]))
    cu = torch.tensor([0, 5, 12], dtype=torch.int32)
    packed = torch.randn(12, 3, 4, 16, generator=gen)
    torch.testing.assert_close(
        sdpa.flash_attn_varlen_qkvpacked_func(packed, cu, 7, causal=True),
        sdpa.flash_attn_varlen_func(packed[:, 0], packed[:, 1], packed[:, 2], cu, cu, 7, 7, causal=True))
    kvp = torch.randn(12, 2, 2, 16, generator=gen)
    torch.testing.assert_close(
        sdpa.flash_attn_varlen_kvpacked_func(packed[:, 0], kvp, cu, cu, 7, 7),
        sdpa.flash_attn_varlen_func(packed[:, 0], kvp[:, 0], kvp[:, 1], cu, cu, 7, 7))
    with pytest.raises(RuntimeError, match="qkv"):
        sdpa.flash_attn_qkvpacked_func(torch.zeros(2, 3, 4))
