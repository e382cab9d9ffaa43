"""Shared helpers of the Python package's tests.

The oracle is PyTorch's own SDPA math path in float64 (torch is a test
requirement: pip install ".[test]"); tests that need torch skip without it.
The accuracy bound is the library's policy (README, "Exact and stable"): the
error of sdpa against the float64 oracle is at most twice the error of a plain
implementation in the same dtype (torch's math path), plus a rounding floor of
a few units of the output dtype at the output's magnitude.
"""

try:
    import torch
except ImportError:  # each test module skips itself (pytest.importorskip)
    torch = None


def _eps():
    return {torch.float32: 2.0**-24, torch.float16: 2.0**-11, torch.bfloat16: 2.0**-8, torch.float64: 2.0**-53}


def math_sdpa(*args, **kwargs):
    """torch's SDPA forced onto its math path (the oracle in float64)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with sdpa_kernel(SDPBackend.MATH):
        return torch.nn.functional.scaled_dot_product_attention(*args, **kwargs)


def assert_policy(got, oracle, plain, dtype, what=""):
    """|got - oracle| <= 2 |plain - oracle| + floor, elementwise maxima."""
    got, oracle, plain = (x.detach().double() for x in (got, oracle, plain))
    assert got.shape == oracle.shape, (got.shape, oracle.shape)
    err = (got - oracle).abs().max().item() if got.numel() else 0.0
    err_plain = (plain - oracle).abs().max().item() if got.numel() else 0.0
    scale = max(1.0, oracle.abs().max().item() if got.numel() else 1.0)
    floor = 8 * _eps()[dtype] * scale
    assert err <= 2 * err_plain + floor, f"{what}: error {err:.3g} > 2 x {err_plain:.3g} + {floor:.3g}"
