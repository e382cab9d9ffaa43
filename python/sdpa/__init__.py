"""sdpa: scaled dot-product attention on the CPU, exact, stable and fast.

    import sdpa
    out = sdpa.scaled_dot_product_attention(q, k, v, is_causal=True)   # torch's SDPA
    out = sdpa.flash_attn_func(q, k, v, causal=True)                    # flash-attn's

Both take torch tensors (with autograd and torch.compile); the first also
takes NumPy arrays. Arrays are read in place (no copy) and handed to the C++
library, which checks every argument and raises ``sdpa.Error`` (a
RuntimeError) naming the argument, what it expected and what it got.
"""

from . import _sdpa
from ._sdpa import Error, compiled_isas, isa, isa_supported
from ._functional import default_scale, scaled_dot_product_attention

__version__ = _sdpa.version()

__all__ = [
    "Error",
    "scaled_dot_product_attention",
    "flash_attn_func",
    "flash_attn_varlen_func",
    "flash_attn_with_kvcache",
    "flash_attn_qkvpacked_func",
    "flash_attn_kvpacked_func",
    "flash_attn_varlen_qkvpacked_func",
    "flash_attn_varlen_kvpacked_func",
    "default_scale",
    "isa",
    "isa_supported",
    "compiled_isas",
]


def __getattr__(name):
    # The flash-attn drop-ins need torch; importing sdpa does not.
    if name.startswith("flash_attn_"):
        from . import flash

        if hasattr(flash, name):
            return getattr(flash, name)
    raise AttributeError(f"module 'sdpa' has no attribute '{name}'")
