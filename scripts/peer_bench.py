#!/usr/bin/env python3
"""Times a peer's attention for `sdpa bench`, one shape per call.

    peer_bench.py torch|onnxruntime --pass forward|backward --dtype f32|f16|bf16 --b 1 --h 8 --hkv 8 \
        --nq 4096 --nkv 4096 --d 128 [--causal] --threads 2 --repeats 3

Q [B, H, Nq, d], K and V [B, Hkv, Nkv, d] (and dO) are drawn in float32 and stored in --dtype, as sdpa
bench does; Hkv < H is grouped-query attention; the scale is 1/sqrt(d).

torch: torch.nn.functional.scaled_dot_product_attention (enable_gqa when Hkv < H), forward or backward.
onnxruntime: an in-memory model with the ONNX Attention operator (opset 23, 4-D inputs, is_causal) run by an
InferenceSession on the CPUExecutionProvider (intra-op threads = --threads, one inter-op thread, sequential
execution); forward only. When this onnxruntime has no CPU kernel for Attention-23, the same attention as a
MatMul-Softmax-MatMul graph (opset 17), named so in "kernel".

Each times one warm-up call, then --repeats calls, and prints one JSON line
{"peer": ..., "ms": median, "kernel": ...}; on a failure {"peer": ..., "error": ...} and exit 1;
exit 3 when the peer cannot be imported (the bench then says so and goes on).
"""
import argparse
import json
import sys
import time


def median_ms(step, repeats):
    step()  # warm-up
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        step()
        times.append((time.perf_counter() - t0) * 1e3)
    times.sort()
    return times[len(times) // 2]


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

    return median_ms(step, a.repeats), f"torch {torch.__version__} {kernel} {a.dtype}"


def attention_model(helper, a):
    """Attention-23 on 4-D Q, K, V (q_num_heads and kv_num_heads are for 3-D inputs only)."""
    node = helper.make_node("Attention", ["Q", "K", "V"], ["Y"], is_causal=int(a.causal))
    return [node], [], 23


def matmul_softmax_model(helper, numpy_helper, np, a):
    """softmax(Q·Kᵀ/sqrt(d) (+ causal mask)) · V with the query heads of a K/V head grouped on the row axis."""
    g = a.h // a.hkv
    ints = lambda name, v: numpy_helper.from_array(np.array(v, dtype=np.int64), name)  # noqa: E731
    npdt = np.float32 if a.dtype == "f32" else np.float16
    inits = [
        ints("grouped", [a.b, a.hkv, g * a.nq, a.d]),
        ints("heads", [a.b, a.h, a.nq, a.nkv]),
        ints("out", [a.b, a.h, a.nq, a.d]),
        numpy_helper.from_array(np.array(1 / np.sqrt(a.d), dtype=npdt), "scale"),
    ]
    nodes = [
        helper.make_node("Reshape", ["Q", "grouped"], ["Qg"]),
        helper.make_node("Transpose", ["K"], ["Kt"], perm=[0, 1, 3, 2]),
        helper.make_node("MatMul", ["Qg", "Kt"], ["S0"]),
        helper.make_node("Mul", ["S0", "scale"], ["S1"]),
        helper.make_node("Reshape", ["S1", "heads"], ["S2"]),
    ]
    scores = "S2"
    if a.causal:
        # key j is visible to query i when j <= i + Nkv - Nq (the lower right corner, as sdpa)
        i = np.arange(a.nq)[:, None]
        j = np.arange(a.nkv)[None, :]
        mask = np.where(j <= i + a.nkv - a.nq, 0, -np.inf).astype(npdt)
        inits.append(numpy_helper.from_array(mask, "mask"))
        nodes.append(helper.make_node("Add", ["S2", "mask"], ["S3"]))
        scores = "S3"
    nodes += [
        helper.make_node("Softmax", [scores], ["P"], axis=-1),
        helper.make_node("Reshape", ["P", "grouped_p"], ["Pg"]),
        helper.make_node("MatMul", ["Pg", "V"], ["Yg"]),
        helper.make_node("Reshape", ["Yg", "out"], ["Y"]),
    ]
    inits.append(ints("grouped_p", [a.b, a.hkv, g * a.nq, a.nkv]))
    return nodes, inits, 17


def onnxruntime_ms(a):
    import numpy as np  # noqa: PLC0415 (optional peers)
    import onnxruntime as ort  # noqa: PLC0415
    from onnx import TensorProto, helper, numpy_helper  # noqa: PLC0415

    if a.pass_ == "backward":
        raise ValueError("onnxruntime has no attention backward")
    elem, npdt = {
        "f32": (TensorProto.FLOAT, np.float32),
        "f16": (TensorProto.FLOAT16, np.float16),
        "bf16": (TensorProto.BFLOAT16, np.float32),
    }[a.dtype]
    rng = np.random.default_rng(0)
    feeds = {
        "Q": rng.standard_normal((a.b, a.h, a.nq, a.d), dtype=np.float32).astype(npdt),
        "K": rng.standard_normal((a.b, a.hkv, a.nkv, a.d), dtype=np.float32).astype(npdt),
        "V": rng.standard_normal((a.b, a.hkv, a.nkv, a.d), dtype=np.float32).astype(npdt),
    }
    so = ort.SessionOptions()
    so.intra_op_num_threads = a.threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL

    def session(nodes, inits, opset):
        io = [helper.make_tensor_value_info(n, elem, list(feeds[n].shape)) for n in ("Q", "K", "V")]
        y = helper.make_tensor_value_info("Y", elem, [a.b, a.h, a.nq, a.d])
        graph = helper.make_graph(nodes, "attention", io, [y], initializer=inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
        model.ir_version = 11 if opset >= 23 else 8
        return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])

    kernel = "Attention-23"
    try:
        sess = session(*attention_model(helper, a))
    except Exception as e:  # noqa: BLE001 (an onnxruntime without opset 23 or a CPU kernel for Attention)
        if a.dtype == "bf16":
            why = str(e).split("\n")[0]
            raise ValueError(f"onnxruntime {ort.__version__} has no CPU Attention-23 for bfloat16 ({why})") from e
        kernel = "MatMul-Softmax-MatMul"
        sess = session(*matmul_softmax_model(helper, numpy_helper, np, a))
    if a.dtype == "bf16":
        raise ValueError(f"onnxruntime {ort.__version__}: numpy has no bfloat16 to feed Attention-23 with")
    out = sess.run(None, feeds)[0]
    if out.shape != (a.b, a.h, a.nq, a.d):
        raise ValueError(f"onnxruntime returned shape {out.shape}, expected {(a.b, a.h, a.nq, a.d)}")
    ms = median_ms(lambda: sess.run(None, feeds), a.repeats)
    return ms, f"onnxruntime {ort.__version__} {kernel} {a.dtype}"


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("peer", choices=["torch", "onnxruntime"])
    p.add_argument("--pass", dest="pass_", choices=["forward", "backward"], default="forward")
    p.add_argument("--dtype", choices=["f32", "f16", "bf16"], default="f32")
    for name in ("b", "h", "hkv", "nq", "nkv", "d"):
        p.add_argument("--" + name, type=int, required=True)
    p.add_argument("--causal", action="store_true")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--repeats", type=int, default=3)
    a = p.parse_args()
    if a.h % a.hkv:
        p.error(f"--h: expected a multiple of --hkv ({a.hkv}), got {a.h}")
    try:
        ms, kernel = (torch_ms if a.peer == "torch" else onnxruntime_ms)(a)
    except ImportError as e:
        print(json.dumps({"peer": a.peer, "error": f"not importable: {e}"}))
        return 3
    except Exception as e:  # noqa: BLE001 (reported to the bench, which shows '-')
        print(json.dumps({"peer": a.peer, "error": f"{type(e).__name__}: {e}".replace("\n", " ")}))
        return 1
    print(json.dumps({"peer": a.peer, "ms": ms, "kernel": kernel}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
