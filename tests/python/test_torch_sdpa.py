"""sdpa.scaled_dot_product_attention against torch's SDPA: forward parity over
randomised shapes, masks, GQA, dtypes and causal; gradients; gradcheck;
dropout; the cases torch defines (empty rows, broadcasting, ranks 2..5)."""

import random

import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F

import sdpa
from conftest import assert_policy, math_sdpa

DTYPES = [torch.float32, torch.float16, torch.bfloat16]


def draw_case(rng: random.Random):
    B = rng.choice([1, 2])
    Hkv = rng.choice([1, 2, 3])
    H = Hkv * rng.choice([1, 2])
    L = rng.randint(1, 70)
    S = rng.randint(1, 70)
    E = rng.choice([8, 16, 24, 32, 64])
    Ev = rng.choice([E, E, 16])
    gqa = H != Hkv
    if not gqa and rng.random() < 0.3:
        Hkv = 1  # key/value with one head broadcast over the query heads (no enable_gqa needed)
    return B, H, Hkv, L, S, E, Ev, gqa


def draw_mask(rng: random.Random, B, H, L, S, gen):
    kind = rng.choice(["none", "none", "bool", "float", "bool_bcast", "float_bcast"])
    if kind == "none":
        return None
    shape = {"bool": (B, H, L, S), "float": (L, S), "bool_bcast": (B, 1, 1, S), "float_bcast": (1, H, L, S)}[kind]
    if kind.startswith("bool"):
        m = torch.rand(shape, generator=gen) < 0.8
        if L > 1 and shape[-2] == L:
            m[..., 0, :] = False  # a row that sees no key: zeros, as torch gives
        return m
    m = torch.randn(shape, generator=gen, dtype=torch.float64)
    m[torch.rand(shape, generator=gen) < 0.15] = float("-inf")
    return m


@pytest.mark.parametrize("seed", range(40))
def test_forward_matches_torch(seed):
    rng = random.Random(seed)
    gen = torch.Generator().manual_seed(seed)
    B, H, Hkv, L, S, E, Ev, gqa = draw_case(rng)
    dtype = DTYPES[seed % 3]
    causal = rng.random() < 0.4
    q = torch.randn(B, H, L, E, generator=gen, dtype=torch.float64)
    k = torch.randn(B, Hkv, S, E, generator=gen, dtype=torch.float64) * rng.choice([1.0, 4.0])
    v = torch.randn(B, Hkv, S, Ev, generator=gen, dtype=torch.float64)
    mask = None if causal else draw_mask(rng, B, H, L, S, gen)
    scale = rng.choice([None, None, 0.3])
    # Inputs rounded to the dtype once; the oracle sees the same rounded values.
    qd, kd, vd = (x.to(dtype) for x in (q, k, v))
    md = mask if mask is None or mask.dtype == torch.bool else mask.to(dtype)
    kwargs = dict(is_causal=causal, scale=scale, enable_gqa=gqa)
    got = sdpa.scaled_dot_product_attention(qd, kd, vd, attn_mask=md, **kwargs)
    oracle = math_sdpa(qd.double(), kd.double(), vd.double(), attn_mask=None if md is None else (
        md if md.dtype == torch.bool else md.double()), **kwargs)
    plain = math_sdpa(qd, kd, vd, attn_mask=md, **kwargs)
    assert got.dtype == dtype and got.shape == oracle.shape
    assert_policy(got, oracle, plain, dtype, f"case {seed}: {dtype} B{B} H{H}/{Hkv} L{L} S{S} E{E}/{Ev}")


@pytest.mark.parametrize("seed", range(16))
def test_gradients_match_torch(seed):
    rng = random.Random(1000 + seed)
    gen = torch.Generator().manual_seed(seed)
    B, H, Hkv, L, S, E, Ev, gqa = draw_case(rng)
    causal = rng.random() < 0.5
    mask = None if causal else draw_mask(rng, B, H, L, S, gen)
    if mask is not None and mask.dtype != torch.bool:
        mask = mask.float()
    kw = dict(is_causal=causal, enable_gqa=gqa, attn_mask=mask)
    base = [torch.randn(B, H, L, E, generator=gen), torch.randn(B, Hkv, S, E, generator=gen),
            torch.randn(B, Hkv, S, Ev, generator=gen)]
    d_out = torch.randn(B, H, L, Ev, generator=gen)

    def grads(fn, dtype):
        xs = [x.detach().to(dtype).clone().requires_grad_() for x in base]
        m = kw["attn_mask"]
        k2 = dict(kw, attn_mask=None if m is None else (m if m.dtype == torch.bool else m.to(dtype)))
        out = fn(*xs, **k2)
        out.backward(d_out.to(dtype))
        return [x.grad for x in xs]

    got = grads(sdpa.scaled_dot_product_attention, torch.float32)
    oracle = grads(math_sdpa, torch.float64)
    plain = grads(math_sdpa, torch.float32)
    for name, g, o, p in zip("qkv", got, oracle, plain):
        assert_policy(g, o, p, torch.float32, f"d{name}, case {seed}")


def test_gradcheck_float64():
    gen = torch.Generator().manual_seed(7)
    q = torch.randn(1, 4, 6, 8, generator=gen, dtype=torch.float64, requires_grad=True)
    k = torch.randn(1, 2, 9, 8, generator=gen, dtype=torch.float64, requires_grad=True)
    v = torch.randn(1, 2, 9, 5, generator=gen, dtype=torch.float64, requires_grad=True)
    for causal in (False, True):
        f = lambda q, k, v: sdpa.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)
        assert torch.autograd.gradcheck(f, (q, k, v))
    mask = torch.randn(6, 9, generator=gen, dtype=torch.float64)
    f = lambda q, k, v: sdpa.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True, scale=0.7)
    assert torch.autograd.gradcheck(f, (q, k, v))


def test_float_mask_gradient_is_refused_not_dropped():
    q = torch.randn(1, 1, 3, 4, requires_grad=True)
    bias = torch.zeros(3, 3, requires_grad=True)
    out = sdpa.scaled_dot_product_attention(q, q, q, attn_mask=bias)
    with pytest.raises(RuntimeError, match="attn_mask"):
        out.sum().backward()


def test_empty_rows_give_zeros_like_torch():
    q, k, v = torch.randn(1, 2, 4, 8), torch.randn(1, 2, 5, 8), torch.randn(1, 2, 5, 8)
    mask = torch.ones(4, 5, dtype=torch.bool)
    mask[2] = False
    got = sdpa.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    want = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    assert torch.equal(got[:, :, 2], torch.zeros_like(got[:, :, 2]))
    torch.testing.assert_close(got, want)
    # top-left causal with more queries than keys: every query sees key 0
    q = torch.randn(1, 1, 7, 8)
    torch.testing.assert_close(sdpa.scaled_dot_product_attention(q, k[:, :1], v[:, :1], is_causal=True),
                               F.scaled_dot_product_attention(q, k[:, :1], v[:, :1], is_causal=True))


@pytest.mark.parametrize(
    "qs,ks,vs",
    [
        ((5, 8), (7, 8), (7, 3)),  # rank 2
        ((3, 5, 8), (3, 7, 8), (3, 7, 8)),  # rank 3: [N, L, E]
        ((2, 3, 2, 5, 8), (2, 3, 2, 7, 8), (2, 3, 2, 7, 8)),  # rank 5
        ((2, 4, 5, 8), (1, 4, 7, 8), (1, 4, 7, 8)),  # batch broadcast
        ((2, 4, 5, 8), (2, 1, 7, 8), (2, 1, 7, 8)),  # one key/value head for all
        ((2, 1, 5, 8), (2, 4, 7, 8), (2, 4, 7, 8)),  # one query head broadcast
        ((5, 8), (2, 3, 7, 8), (2, 3, 7, 8)),  # query broadcast over batch and heads
    ],
)
def test_broadcasting_and_ranks(qs, ks, vs):
    gen = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(s, generator=gen) for s in (qs, ks, vs))
    for causal in (False, True):
        got = sdpa.scaled_dot_product_attention(q, k, v, is_causal=causal)
        want = math_sdpa(q.double(), k.double(), v.double(), is_causal=causal)
        assert got.shape == want.shape
        torch.testing.assert_close(got.double(), want, atol=2e-6, rtol=1e-5)
    # gradients reach broadcast inputs summed, as torch's do
    xs = [x.clone().requires_grad_() for x in (q, k, v)]
    sdpa.scaled_dot_product_attention(*xs).sum().backward()
    ys = [x.double().clone().requires_grad_() for x in (q, k, v)]
    math_sdpa(*ys).sum().backward()
    for x, y in zip(xs, ys):
        torch.testing.assert_close(x.grad.double(), y.grad, atol=1e-5, rtol=1e-4)


def test_strided_inputs_are_read_in_place():
    # [B, N, H, E] memory viewed as [B, H, N, E]: no copy, same result
    base = torch.randn(2, 9, 4, 16)
    q = base.transpose(1, 2)
    assert not q.is_contiguous()
    got = sdpa.scaled_dot_product_attention(q, q, q, is_causal=True)
    torch.testing.assert_close(got, F.scaled_dot_product_attention(q, q, q, is_causal=True), atol=2e-6, rtol=1e-5)
    seen = dict(sdpa._sdpa._last_views())
    assert seen["q"] == q.data_ptr() and seen["k"] == q.data_ptr() and seen["v"] == q.data_ptr()
    assert seen["o"] == got.data_ptr()


def test_no_input_is_copied():
    gen = torch.Generator().manual_seed(5)
    for dtype in DTYPES:
        q = torch.randn(2, 4, 33, 32, generator=gen).to(dtype)
        k = torch.randn(2, 2, 40, 32, generator=gen).to(dtype)
        v = torch.randn(2, 40, 2, 32, generator=gen).to(dtype).transpose(1, 2)  # strided
        mask = torch.rand(33, 40, generator=gen) < 0.9
        sdpa.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
        seen = dict(sdpa._sdpa._last_views())
        assert seen["q"] == q.data_ptr()
        assert seen["k"] == k.data_ptr()
        assert seen["v"] == v.data_ptr()
        assert seen["mask"] == mask.data_ptr()


def test_dropout_reproducible_and_differentiable():
    gen = torch.Generator().manual_seed(11)
    q = torch.randn(2, 2, 20, 16, generator=gen, requires_grad=True)
    k = torch.randn(2, 2, 24, 16, generator=gen, requires_grad=True)
    v = torch.randn(2, 2, 24, 16, generator=gen, requires_grad=True)
    torch.manual_seed(123)
    a = sdpa.scaled_dot_product_attention(q, k, v, dropout_p=0.3)
    torch.manual_seed(123)
    b = sdpa.scaled_dot_product_attention(q, k, v, dropout_p=0.3)
    c = sdpa.scaled_dot_product_attention(q, k, v, dropout_p=0.3)
    assert torch.equal(a, b) and not torch.equal(a, c)
    # Expected value: the mean over many draws approaches the no-dropout output.
    ref = sdpa.scaled_dot_product_attention(q, k, v)
    mean = sum(sdpa.scaled_dot_product_attention(q, k, v, dropout_p=0.3) for _ in range(200)) / 200
    assert (mean - ref).abs().mean().item() < 0.05
    # The backward regenerates the forward's keep decisions: gradcheck in float64
    q64, k64, v64 = (x.detach().double().requires_grad_() for x in (q[:1, :1, :5], k[:1, :1, :6], v[:1, :1, :6]))

    def f(q, k, v):
        torch.manual_seed(9)
        return sdpa.scaled_dot_product_attention(q, k, v, dropout_p=0.4)

    assert torch.autograd.gradcheck(f, (q64, k64, v64))


def test_torch_compile_fullgraph():
    gen = torch.Generator().manual_seed(2)
    q = torch.randn(2, 4, 16, 32, generator=gen, requires_grad=True)
    k = torch.randn(2, 2, 16, 32, generator=gen, requires_grad=True)
    v = torch.randn(2, 2, 16, 32, generator=gen, requires_grad=True)

    def f(q, k, v):
        return sdpa.scaled_dot_product_attention(q * 2, k, v, is_causal=True, enable_gqa=True).relu().sum()

    compiled = torch.compile(f, fullgraph=True)
    loss = compiled(q, k, v)
    loss.backward()
    grads = [x.grad.clone() for x in (q, k, v)]
    for x in (q, k, v):
        x.grad = None
    eager = f(q, k, v)
    eager.backward()
    torch.testing.assert_close(loss, eager)
    for g, x in zip(grads, (q, k, v)):
        torch.testing.assert_close(g, x.grad)


def test_opcheck():
    from sdpa import _torch as ops

    q = torch.randn(1, 2, 5, 8, requires_grad=True)
    args = (q, q.detach().clone().requires_grad_(), q.detach().clone().requires_grad_(), None, None, None, None,
            "bhsd", None, True, True, -1, -1, 0.0, 0.0, False)
    torch.library.opcheck(ops.attention_op, args)


@pytest.mark.parametrize(
    "call,message",
    [
        (lambda q: sdpa.scaled_dot_product_attention(q, q, q, attn_mask=torch.ones(4, 4, dtype=torch.bool),
                                                     is_causal=True), "attn_mask should not be set"),
        (lambda q: sdpa.scaled_dot_product_attention(q, q.double(), q), "same dtype"),
        (lambda q: sdpa.scaled_dot_product_attention(q, q, q, dropout_p=1.5), "between 0 and 1"),
        (lambda q: sdpa.scaled_dot_product_attention(q, q[..., :3], q), "head size"),
        (lambda q: sdpa.scaled_dot_product_attention(q, q[:, :1, :3], q[:, :1]), "keys"),
        (lambda q: sdpa.scaled_dot_product_attention(q.repeat(1, 4, 1, 1), q.repeat(1, 3, 1, 1),
                                                     q.repeat(1, 3, 1, 1), enable_gqa=True), "divide"),
        (lambda q: sdpa.scaled_dot_product_attention(q.repeat(1, 4, 1, 1), q.repeat(1, 2, 1, 1),
                                                     q.repeat(1, 2, 1, 1)), "enable_gqa"),
        (lambda q: sdpa.scaled_dot_product_attention(q, q, q, attn_mask=torch.ones(3, 4, 4, dtype=torch.bool)),
         "attn_mask"),
        (lambda q: sdpa.scaled_dot_product_attention(q.int(), q.int(), q.int()), "int32"),
        (lambda q: sdpa.scaled_dot_product_attention(q, q, q, scale=float("nan")), "scale"),
    ],
)
def test_errors_where_torch_raises(call, message):
    q = torch.randn(1, 1, 4, 4)
    with pytest.raises(RuntimeError, match=message):
        call(q)


def test_gil_is_released():
    import threading
    import time

    q = torch.randn(1, 8, 1024, 64)
    done = threading.Event()
    ticks = []

    def ticker():
        while not done.is_set():
            ticks.append(time.perf_counter())
            time.sleep(0.001)

    t = threading.Thread(target=ticker)
    t.start()
    start = time.perf_counter()
    for _ in range(3):
        sdpa.scaled_dot_product_attention(q, q, q)
    elapsed = time.perf_counter() - start
    done.set()
    t.join()
    # Python code kept running while the library computed.
    during = [x for x in ticks if start <= x <= start + elapsed]
    assert len(during) >= 3, (len(during), elapsed)


@pytest.mark.parametrize("scale", [-0.5, 0.0, 2.0])
def test_any_finite_scale_as_torch(scale):
    gen = torch.Generator().manual_seed(13)
    q, k, v = (torch.randn(1, 2, 6, 8, generator=gen, dtype=torch.float64, requires_grad=True) for _ in range(3))
    mask = torch.rand(6, 6, generator=gen) < 0.7
    got = sdpa.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)
    want = math_sdpa(q, k, v, attn_mask=mask, scale=scale)
    torch.testing.assert_close(got, want, atol=1e-12, rtol=1e-12)
    g = torch.autograd.grad(got.square().sum(), (q, k, v))
    w = torch.autograd.grad(want.square().sum(), (q, k, v))
    for a, b in zip(g, w):
        torch.testing.assert_close(a, b, atol=1e-11, rtol=1e-10)


def test_dropout_one_drops_everything():
    q = torch.randn(1, 1, 4, 8, requires_grad=True)
    out = sdpa.scaled_dot_product_attention(q, q, q, dropout_p=1.0)
    assert torch.equal(out, torch.zeros_like(out))
    out.sum().backward()
    assert torch.equal(q.grad, torch.zeros_like(q))
