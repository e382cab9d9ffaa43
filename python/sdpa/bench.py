"""python -m sdpa.bench: sdpa against torch's SDPA, side by side in one process.

For each shape it times ``sdpa.scaled_dot_product_attention`` and
``torch.nn.functional.scaled_dot_product_attention`` on the same tensors,
alternating the two (so both see the same machine state), forward alone and
forward + backward, and prints the medians and the ratio torch / sdpa (above 1:
sdpa is faster). The shapes are the README's: prefill B = 1, H = 8 at N = 1024
and 4096, d = 64 and 128, causal or not; decode Nq = 1, d = 128, GQA (H = 32,
Hkv = 8) and MHA (H = Hkv = 32) at Nkv = 16384 (forward only).

    python -m sdpa.bench                    # 2 threads, float32
    python -m sdpa.bench --threads 1 --n 512 2048 --d 128 --dtype bfloat16 --json out.json

torch's CPU build runs its threads on OpenMP (libgomp), whose workers spin for
some milliseconds after each parallel region before they sleep. Timed right
after a torch call, an sdpa call shares the cores with those spinning workers
(on 2 cores, H = 8, N = 512, d = 64: 1.3-1.7x slower). So that each call is
timed on the machine it would have alone, the bench sets OMP_WAIT_POLICY=PASSIVE
before it imports torch (unless the environment already sets it, or torch is
already imported); ``--omp-wait torch`` keeps torch's default instead.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import sdpa

# torch is imported in the functions, not here: main() chooses the OpenMP wait
# policy first (libgomp reads it when torch loads it).


def _time(fn, repeats: int):
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return times


def _pair(a, b, repeats: int, warmup: int = 1):
    """Interleaved medians (seconds) of two callables."""
    for _ in range(warmup):
        a()
        b()
    ta, tb = [], []
    for _ in range(repeats):
        ta += _time(a, 1)
        tb += _time(b, 1)
    return statistics.median(ta), statistics.median(tb)


def prefill_cases(ns, ds, causal_modes):
    for n in ns:
        for d in ds:
            for causal in causal_modes:
                yield dict(kind="prefill", B=1, H=8, Hkv=8, Nq=n, Nkv=n, d=d, causal=causal)


def decode_cases(nkvs):
    for nkv in nkvs:
        for hkv in (8, 32):
            yield dict(kind="decode", B=1, H=32, Hkv=hkv, Nq=1, Nkv=nkv, d=128, causal=False)


def run_case(case, dtype, repeats: int, backward: bool):
    import torch  # noqa: PLC0415 (see the note on imports)
    import torch.nn.functional as F  # noqa: PLC0415

    gen = torch.Generator().manual_seed(0)
    B, H, Hkv, Nq, Nkv, d = (case[x] for x in ("B", "H", "Hkv", "Nq", "Nkv", "d"))
    q = torch.randn(B, H, Nq, d, generator=gen).to(dtype)
    k = torch.randn(B, Hkv, Nkv, d, generator=gen).to(dtype)
    v = torch.randn(B, Hkv, Nkv, d, generator=gen).to(dtype)
    kw = dict(is_causal=case["causal"], enable_gqa=H != Hkv)
    with torch.no_grad():
        ours = sdpa.scaled_dot_product_attention(q, k, v, **kw)
        theirs = F.scaled_dot_product_attention(q, k, v, **kw)
    max_diff = (ours.float() - theirs.float()).abs().max().item()
    with torch.no_grad():
        t_sdpa, t_torch = _pair(lambda: sdpa.scaled_dot_product_attention(q, k, v, **kw),
                                lambda: F.scaled_dot_product_attention(q, k, v, **kw), repeats)
    row = dict(case, dtype=str(dtype).replace("torch.", ""), fwd_sdpa_ms=t_sdpa * 1e3, fwd_torch_ms=t_torch * 1e3,
               fwd_ratio=t_torch / t_sdpa, max_diff=max_diff)
    if backward:
        g = torch.randn(B, H, Nq, d, generator=gen).to(dtype)
        xs = [x.clone().requires_grad_() for x in (q, k, v)]

        def step(fn):
            def run():
                for x in xs:
                    x.grad = None
                fn(*xs, **kw).backward(g)
            return run

        t_sdpa, t_torch = _pair(step(sdpa.scaled_dot_product_attention), step(F.scaled_dot_product_attention),
                                repeats)
        row.update(fwdbwd_sdpa_ms=t_sdpa * 1e3, fwdbwd_torch_ms=t_torch * 1e3, fwdbwd_ratio=t_torch / t_sdpa)
    return row


def omp_wait_policy(choice: str) -> str:
    """Sets OMP_WAIT_POLICY for torch's libgomp where it can; says what holds."""
    given = os.environ.get("OMP_WAIT_POLICY")
    if given is not None:
        return f"{given} (from the environment)"
    if choice == "torch":
        return "torch's default (workers spin for a while after each call)"
    if "torch" in sys.modules:
        return "torch's default (torch was imported before the bench could set OMP_WAIT_POLICY)"
    os.environ["OMP_WAIT_POLICY"] = "PASSIVE"
    return "PASSIVE (set by the bench: --omp-wait torch keeps torch's default)"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m sdpa.bench", description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=2, help="threads for both (torch.set_num_threads); default 2")
    ap.add_argument("--n", type=int, nargs="+", default=[1024, 4096], help="prefill sequence lengths")
    ap.add_argument("--d", type=int, nargs="+", default=[64, 128], help="prefill head sizes")
    ap.add_argument("--nkv", type=int, nargs="*", default=[16384], help="decode cache lengths (none: no decode)")
    ap.add_argument("--causal", choices=["both", "yes", "no"], default="both")
    ap.add_argument("--dtype", choices=["float32", "float16", "bfloat16"], default="float32")
    ap.add_argument("--repeats", type=int, default=5, help="timed runs of each, interleaved (median)")
    ap.add_argument("--no-backward", action="store_true", help="forward only")
    ap.add_argument("--json", metavar="FILE", help="also write the rows as JSON")
    ap.add_argument("--omp-wait", choices=["passive", "torch"], default="passive",
                    help="OpenMP wait policy of torch's threads: passive (sleep between calls; default) or torch's own "
                         "default (spin for a while after each call)")
    args = ap.parse_args(argv)
    if args.threads < 1 or args.repeats < 1:
        ap.error("--threads and --repeats: expected integers >= 1")

    wait = omp_wait_policy(args.omp_wait)
    import torch  # noqa: PLC0415 (after the wait policy)

    torch.set_num_threads(args.threads)
    dtype = getattr(torch, args.dtype)
    causal_modes = {"both": (False, True), "yes": (True,), "no": (False,)}[args.causal]
    print(f"sdpa {sdpa.__version__} ({sdpa.isa()}) vs torch {torch.__version__}, {args.threads} threads, "
          f"{args.dtype}, median of {args.repeats} interleaved runs; ratio = torch ms / sdpa ms (> 1: sdpa faster)")
    print(f"OpenMP wait policy of torch's threads: {wait}")
    header = f"{'shape':<38} {'fwd sdpa':>9} {'fwd torch':>9} {'ratio':>6}"
    if not args.no_backward:
        header += f" {'f+b sdpa':>9} {'f+b torch':>9} {'ratio':>6}"
    print(header)
    rows = []
    cases = list(prefill_cases(args.n, args.d, causal_modes)) + list(decode_cases(args.nkv))
    for case in cases:
        backward = not args.no_backward and case["kind"] == "prefill"
        row = run_case(case, dtype, args.repeats, backward)
        rows.append(row)
        name = (f"{case['kind']} H={case['H']}/{case['Hkv']} N={case['Nq']}x{case['Nkv']} d={case['d']}"
                + (" causal" if case["causal"] else ""))
        line = f"{name:<38} {row['fwd_sdpa_ms']:9.2f} {row['fwd_torch_ms']:9.2f} {row['fwd_ratio']:5.2f}x"
        if backward:
            line += f" {row['fwdbwd_sdpa_ms']:9.2f} {row['fwdbwd_torch_ms']:9.2f} {row['fwdbwd_ratio']:5.2f}x"
        print(line, flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
