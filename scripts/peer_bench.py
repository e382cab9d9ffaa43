#!/usr/bin/env python3
"""Times a peer's attention for `sdpa bench`, one shape per call.

    peer_bench.py torch --pass forward|backward --dtype f32|f16|bf16 --b 1 --h 8 --hkv 8 \
        --nq 4096 --nkv 4096 --d 128 [--causal] --threads 2 --repeats 3

Q, K, V (and dO) are drawn in float32 and stored in --dtype, as sdpa bench does.

prints one JSON line {"peer": ..., "ms": median, "kernel": ...} on success;
exits 3 when the peer cannot be imported (the bench then says so and goes on).
"""
import argparse
import json
import sys
import time


def torch_ms(a):
    import torch  # noqa: PLC0415 (an optional peer)

    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    f = torch.nn.functional.scaled_dot_product_attention
    need = a.pass_ == "backward"
    dtype = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}[a.dtype]

    def randn(*shape):
        return torch.randn(*shape).to(dtype).requires_grad_(need)

    q = randn(a.b, a.h, a.nq, a.d)
    k = randn(a.b, a.hkv, a.nkv, a.d)
    v = randn(a.b, a.hkv, a.nkv, a.d)
    kw = {"is_causal": a.causal}
    if a.hkv != a.h:
        kw["enable_gqa"] = True
    if need:
        o = f(q, k, v, **kw)
        go = torch.randn_like(o)
        kernel = type(o.grad_fn).__name__

        def step():
            torch.autograd.grad(o, (q, k, v), go, retain_graph=True)
    else:
        kernel = "scaled_dot_product_attention"

        def step():
            with torch.no_grad():
                f(q, k, v, **kw)

    step()  # warm-up
    times = []
    for _ in range(a.repeats):
        t0 = time.perf_counter()
        step()
        times.append((time.perf_counter() - t0) * 1e3)
    times.sort()
    return times[len(times) // 2], f"torch {torch.__version__} {kernel} {a.dtype}"


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("peer", choices=["torch"])
    p.add_argument("--pass", dest="pass_", choices=["forward", "backward"], default="forward")
    p.add_argument("--dtype", choices=["f32", "f16", "bf16"], default="f32")
    for name in ("b", "h", "hkv", "nq", "nkv", "d"):
        p.add_argument("--" + name, type=int, required=True)
    p.add_argument("--causal", action="store_true")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--repeats", type=int, default=3)
    a = p.parse_args()
    try:
        ms, kernel = torch_ms(a)
    except ImportError as e:
        print(json.dumps({"peer": a.peer, "error": f"not importable: {e}"}))
        return 3
    print(json.dumps({"peer": a.peer, "ms": ms, "kernel": kernel}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
