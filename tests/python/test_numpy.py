"""The NumPy front end of sdpa.scaled_dot_product_attention: NumPy in, NumPy
out, read in place, torch's semantics (checked against torch's float64 math)."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import sdpa
from conftest import math_sdpa


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.float64])
@pytest.mark.parametrize("causal", [False, True])
def test_numpy_matches_torch(dtype, causal):
    rng = np.random.default_rng(1)
    q = rng.standard_normal((2, 4, 19, 32)).astype(dtype)
    k = rng.standard_normal((2, 2, 23, 32)).astype(dtype)
    v = rng.standard_normal((2, 2, 23, 16)).astype(dtype)
    out = sdpa.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)
    assert isinstance(out, np.ndarray) and out.dtype == dtype and out.shape == (2, 4, 19, 16)
    want = math_sdpa(*(torch.from_numpy(x.astype(np.float64)) for x in (q, k, v)), is_causal=causal,
                     enable_gqa=True).numpy()
    tol = {np.float32: 2e-6, np.float16: 2e-3, np.float64: 1e-12}[dtype]
    np.testing.assert_allclose(out.astype(np.float64), want, atol=tol, rtol=0)


def test_numpy_mask_broadcast_and_no_copy():
    rng = np.random.default_rng(2)
    base = rng.standard_normal((3, 17, 2, 8)).astype(np.float32)
    q = base.transpose(0, 2, 1, 3)  # [B, H, N, E] view of [B, N, H, E] memory
    mask = rng.random((17, 17)) < 0.7
    fmask = np.where(rng.random((1, 2, 17, 17)) < 0.2, -np.inf, 0.0).astype(np.float32)
    for m in (mask, fmask):
        out = sdpa.scaled_dot_product_attention(q, q, q, attn_mask=m)
        seen = dict(sdpa._sdpa._last_views())
        assert seen["q"] == q.ctypes.data and seen["mask"] == m.ctypes.data
        tq = torch.from_numpy(np.ascontiguousarray(q)).double()
        want = math_sdpa(tq, tq, tq, attn_mask=torch.from_numpy(m) if m.dtype == bool else
                         torch.from_numpy(m).double()).numpy()
        np.testing.assert_allclose(out, want, atol=2e-6)


def test_numpy_read_only_and_broadcast_inputs():
    rng = np.random.default_rng(3)
    q = rng.standard_normal((5, 8)).astype(np.float32)
    k = np.broadcast_to(rng.standard_normal((1, 1, 7, 8)).astype(np.float32), (2, 3, 7, 8))
    q.setflags(write=False)
    out = sdpa.scaled_dot_product_attention(q, k, k)
    assert out.shape == (2, 3, 5, 8)
    want = math_sdpa(torch.from_numpy(q.copy()).double(), torch.from_numpy(k.copy()).double(),
                     torch.from_numpy(k.copy()).double()).numpy()
    np.testing.assert_allclose(out, want, atol=2e-6)


def test_numpy_errors():
    q = np.zeros((1, 1, 4, 4), np.float32)
    with pytest.raises(sdpa.Error, match="same dtype"):
        sdpa.scaled_dot_product_attention(q, q.astype(np.float64), q)
    with pytest.raises(sdpa.Error, match="int32"):
        sdpa.scaled_dot_product_attention(q.astype(np.int32), q.astype(np.int32), q.astype(np.int32))
    with pytest.raises(RuntimeError, match="scale"):
        sdpa.scaled_dot_product_attention(q, q, q, scale=float("inf"))
    assert issubclass(sdpa.Error, RuntimeError)
