#!/usr/bin/env python3
"""Writes the seed corpora fuzz/corpus/<target>/ (deterministic; rerun after
changing how a target decodes its input). Standard library only."""
import json
import os
import random
import struct

HERE = os.path.dirname(os.path.abspath(__file__))


def put(target, name, data):
    d = os.path.join(HERE, "corpus", target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


def npy(descr, shape, payload, version=(1, 0), fortran=False, quote="'"):
    q = quote
    shape_s = "(" + "".join(f"{n}, " if len(shape) == 1 else f"{n}, " for n in shape).rstrip(", ")
    shape_s += ",)" if len(shape) == 1 else ")"
    header = "{" + f"{q}descr{q}: {q}{descr}{q}, {q}fortran_order{q}: {fortran}, {q}shape{q}: {shape_s}, " + "}"
    lenbytes = 2 if version[0] == 1 else 4
    pre = 6 + 2 + lenbytes
    pad = (64 - (pre + len(header) + 1) % 64) % 64
    header = header + " " * pad + "\n"
    hl = struct.pack("<H" if lenbytes == 2 else "<I", len(header))
    return b"\x93NUMPY" + bytes(version) + hl + header.encode("latin1") + payload


def main():
    # .npy files of every dtype the reader takes, each header variant once.
    put("fuzz_npy", "f4_2x3.npy", npy("<f4", (2, 3), struct.pack("<6f", *range(6))))
    put("fuzz_npy", "f8_4.npy", npy("<f8", (4,), struct.pack("<4d", 1, -2, 3.5, 1e300)))
    put("fuzz_npy", "f2_2x2x2.npy", npy("<f2", (2, 2, 2), struct.pack("<8e", *[0.5 * i for i in range(8)])))
    put("fuzz_npy", "b1_3.npy", npy("|b1", (3,), b"\x01\x00\x01"))
    put("fuzz_npy", "i4_scalar.npy", npy("<i4", (), struct.pack("<i", -7)))
    put("fuzz_npy", "i8_1x2x1x2x1.npy", npy("<i8", (1, 2, 1, 2, 1), struct.pack("<4q", 1, 2, 3, 4)))
    put("fuzz_npy", "v2_dquote_empty.npy", npy("<f4", (0, 5), b"", version=(2, 0), quote='"'))
    put("fuzz_npy", "v3_f4.npy", npy("<f4", (1,), struct.pack("<f", 3.0), version=(3, 0)))
    put("fuzz_npy", "fortran.npy", npy("<f4", (2, 2), struct.pack("<4f", 1, 2, 3, 4), fortran=True))
    put("fuzz_npy", "bigendian.npy", npy(">f4", (1,), struct.pack(">f", 1.0)))

    # The FuzzedDataProvider targets: random bytes of a few sizes (their
    # decoders take any input; sizes decide how much data the tensors get).
    rng = random.Random(1)
    for target in ("fuzz_onnx", "fuzz_attention"):
        for i, n in enumerate((16, 64, 200, 600, 1500, 4000)):
            put(target, f"random_{i}_{n}", bytes(rng.randrange(256) for _ in range(n)))
    # One of each mode of fuzz_attention (its first integral, the last byte, picks it).
    for mode in range(4):
        body = bytes(rng.randrange(256) for _ in range(900))
        put("fuzz_attention", f"mode_{mode}", body + bytes([mode]))

    # Explorer: first byte = endpoint (fuzz_explorer.cpp's kEndpoints), then the body.
    reqs = [
        (0, ""),
        (1, {"score": 3.5, "dk": 64}),
        (2, {"scores": [1, 2, 3, -4], "labels": ["a", "b", "c", "d"], "dk": 16}),
        (3, {"dk": 8, "seed": 3, "keys": 4, "trials": 16, "bins": 8}),
        (4, {"dk_max": 8, "seed": 1, "keys": 4, "trials": 16}),
        (5, {"tokens": ["the", "cat", "sat"], "d": 4, "dv": 2, "seed": 2, "causal": True}),
        (5, {"tokens": ["a", "b"], "d": 1, "dv": 1, "q": [[1], [2]], "k": [[0.5], [1]], "v": [[1], [0]]}),
        (6, {"scores": [2, 1, 0], "dk": 4, "big_dk": 64, "seed": 5}),
        (2, '{"scores": [1e309], "dk": 0}'),
        (8, "{}"),
    ]
    for i, (ep, body) in enumerate(reqs):
        text = body if isinstance(body, str) else json.dumps(body)
        put("fuzz_explorer", f"req_{i}", bytes([ep]) + text.encode())

    # CLI: NUL-separated argv after "sdpa".
    argvs = [
        ["--help"], ["--version"], ["demo"], ["explain", "--help"], ["run", "--help"], ["onnx", "--help"],
        ["decode", "--help"], ["bench", "--help"], ["stats", "--help"], ["serve", "--port", "0"],
        ["run", "--q", "q.npy", "--k", "k.npy", "--v", "v.npy", "--out", "o.npy", "--causal"],
        ["bench", "--isa", "avx2"], ["nope"],
        # `run` on fuzz_cli.cpp's own files: the forward with every modifier,
        # the backward with sinks and dropout, packed rows, and failures.
        ["run", "--q", "q.npy", "--k", "k.npy", "--v", "v.npy", "--out", "o.npy", "--lse", "lse.npy", "--probs", "p.npy",
         "--mask", "mask.npy", "--alibi-slopes", "alibi.npy", "--sinks", "sinks.npy", "--align", "top-left",
         "--softcap", "5", "--window-left", "2", "--dropout", "0.5", "--seed", "7", "--dropout-offset", "3",
         "--dropout-mask", "dm.npy"],
        ["run", "--q", "q.npy", "--k", "k.npy", "--v", "v.npy", "--out", "o.npy", "--do", "do.npy", "--dq", "dq.npy",
         "--dk", "dk.npy", "--dv", "dv.npy", "--sinks", "sinks.npy", "--dsinks", "ds.npy", "--dropout", "0.1",
         "--seed", "18446744073709551615", "--causal", "--mask", "fmask.npy"],
        ["run", "--q", "qp.npy", "--k", "kp.npy", "--v", "vp.npy", "--out", "o.npy", "--cu-seqlens-q", "cuq.npy",
         "--cu-seqlens-k", "cuk.npy", "--do", "dop.npy", "--dq", "dq.npy", "--dk", "dk.npy", "--dv", "dv.npy",
         "--causal", "--dropout", "0.25"],
        ["run", "--q", "qs.npy", "--k", "ks.npy", "--v", "vs.npy", "--out", "o.npy", "--layout", "bshd", "--do", "dos.npy",
         "--dq", "dq.npy", "--dk", "dk.npy", "--dv", "dv.npy", "--reference", "--alibi-slopes", "alibi2.npy"],
        ["run", "--q", "q3.npy", "--k", "k3.npy", "--v", "v3.npy", "--out", "o.npy", "--do", "do3.npy", "--dq", "dq.npy",
         "--dk", "dk.npy", "--dv", "dv.npy", "--dropout-offset", "4294967296", "--dropout", "0.1"],
        ["run", "--q", "q64.npy", "--k", "k.npy", "--v", "v.npy", "--out", "q.npy", "--do", "junk.npy", "--dq", "dq.npy",
         "--dk", "dk.npy", "--dv", "dv.npy"],
    ]
    for i, argv in enumerate(argvs):
        put("fuzz_cli", f"argv_{i}", "\0".join(argv))

    # fuzz_backward: random bytes of a few sizes, and one of each storage
    # (dense, packed: its first integral, the last byte, picks it) with and
    # without a large problem (the second-to-last byte, 0 of 16).
    rng = random.Random(2)
    for i, n in enumerate((16, 200, 1500, 4000)):
        put("fuzz_backward", f"random_{i}_{n}", bytes(rng.randrange(256) for _ in range(n)))
    for packed in range(2):
        for big in range(2):
            body = bytes(rng.randrange(256) for _ in range(1200))
            put("fuzz_backward", f"{'packed' if packed else 'dense'}{'_big' if big else ''}",
                body + bytes([0 if big else 255, packed]))


if __name__ == "__main__":
    main()
