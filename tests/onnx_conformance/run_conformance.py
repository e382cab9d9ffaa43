#!/usr/bin/env python3
"""ONNX's own Attention node tests, run against `sdpa onnx`.

    run_conformance.py SDPA_BINARY [--data DIR] [--keep DIR] [-k TEXT] [--reference]

The test cases are those the `onnx` package ships as generators
(onnx/backend/test/case/node/attention.py). They are generated here with
onnx's own machinery (collect_testcases, seeded as in ONNX) and written in
the layout of ONNX's backend test data (CASE/model.onnx,
CASE/test_data_set_0/input_N.pb, output_N.pb) into a temporary folder, or
read from an existing such folder with --data (e.g. onnx/backend/test/data/node
of an onnx source tree). For every test_attention* case the Attention node's
attributes and the opset come from model.onnx, the arrays from the .pb files;
inputs are written as .npy, `SDPA_BINARY onnx` is run, and every output is
compared with the expected one.

Tolerances (|got - want| <= atol + rtol·|want|, non-finite values must match):
  float32:  rtol 1e-3, atol 1e-7   ONNX's backend-test defaults
  float16:  rtol 4e-3, atol 1e-4   looser: ONNX's reference computes in float16,
                                   we compute in float32 and round once
  bfloat16: rtol 2^-6, atol 1e-7   ONNX's backend-test rule for bfloat16
bfloat16 cases are run through float32 files (.npy has no bfloat16): the
inputs are widened exactly, the float32 outputs rounded to bfloat16 (nearest
even) and then compared; the table marks them.

`_expanded` cases (ONNX's test of its function-body expansion of the same
node, with the same data) have no Attention node of their own: they are run
with the node of their base case and listed separately.

Exit status: 0 when every case passes, 1 otherwise, 2 on a usage error.
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import warnings
from dataclasses import dataclass, field

import numpy as np

try:
    import onnx
    from onnx import helper, numpy_helper
except ImportError:  # pragma: no cover
    sys.exit("run_conformance.py: needs the onnx and numpy packages (pip install onnx numpy)")

try:
    import ml_dtypes

    BF16 = np.dtype(ml_dtypes.bfloat16)
except ImportError:  # pragma: no cover
    ml_dtypes = None
    BF16 = None

# Positional inputs and outputs of Attention (opsets 23-25) and our flags for them.
INPUT_FLAGS = ["--Q", "--K", "--V", "--attn-mask", "--past-key", "--past-value", "--nonpad-kv-seqlen"]
OUTPUT_FLAGS = ["--Y", "--present-key", "--present-value", "--qk-matmul-output"]
ATTRIBUTE_FLAGS = {
    "is_causal": "--is-causal",
    "scale": "--scale",
    "softcap": "--softcap",
    "q_num_heads": "--q-num-heads",
    "kv_num_heads": "--kv-num-heads",
    "softmax_precision": "--softmax-precision",
    "qk_matmul_output_mode": "--qk-matmul-output-mode",
    "left_window_size": "--left-window-size",
    "right_window_size": "--right-window-size",
}
SUPPORTED_OPSETS = (23, 24, 25)

TOLERANCES = {  # dtype name -> (rtol, atol)
    "float32": (1e-3, 1e-7),
    "float64": (1e-3, 1e-7),
    "float16": (4e-3, 1e-4),
    "bfloat16": (2.0**-6, 1e-7),
}


# ---------------------------------------------------------------------------
# Generating the cases


def generate(out_dir: str) -> None:
    """Writes ONNX's Attention node test cases to out_dir/CASE/... as ONNX's generate-data does."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the generators of other operators warn (divide by zero, ...)
        from onnx.backend.test.case.node import collect_testcases

        cases = collect_testcases("Attention")
    for case in cases:
        if not case.name.startswith("test_attention"):
            continue
        case_dir = os.path.join(out_dir, case.name)
        data_dir = os.path.join(case_dir, "test_data_set_0")
        os.makedirs(data_dir)
        with open(os.path.join(case_dir, "model.onnx"), "wb") as f:
            f.write(case.model.SerializeToString())
        inputs, outputs = case.data_sets[0]
        for kind, arrays, infos in (("input", inputs, case.model.graph.input), ("output", outputs, case.model.graph.output)):
            for j, array in enumerate(arrays):
                proto = array if isinstance(array, onnx.TensorProto) else numpy_helper.from_array(array, infos[j].name)
                with open(os.path.join(data_dir, f"{kind}_{j}.pb"), "wb") as f:
                    f.write(proto.SerializeToString())


# ---------------------------------------------------------------------------
# Running one case


@dataclass
class Result:
    name: str
    opset: int | str = "?"
    dtype: str = "?"
    status: str = "FAIL"
    max_abs: float | None = None
    worst_ratio: float | None = None  # max |err| / (atol + rtol·|want|): <= 1 passes
    notes: list[str] = field(default_factory=list)


def read_tensor(path: str) -> np.ndarray:
    proto = onnx.TensorProto()
    with open(path, "rb") as f:
        proto.ParseFromString(f.read())
    return numpy_helper.to_array(proto)


def attention_node(model: onnx.ModelProto) -> onnx.NodeProto | None:
    nodes = [n for n in model.graph.node if n.op_type == "Attention" and n.domain in ("", "ai.onnx")]
    return nodes[0] if len(nodes) == 1 else None


def onnx_opset(model: onnx.ModelProto) -> int | None:
    for o in model.opset_import:
        if o.domain in ("", "ai.onnx"):
            return o.version
    return None


def data_sets(case_dir: str) -> list[str]:
    return sorted(d for d in os.listdir(case_dir) if d.startswith("test_data_set_"))


def pb_files(folder: str, kind: str) -> list[str]:
    files = [f for f in os.listdir(folder) if re.fullmatch(kind + r"_\d+\.pb", f)]
    return [os.path.join(folder, f) for f in sorted(files, key=lambda f: int(f[len(kind) + 1 : -3]))]


def compare(got: np.ndarray, want: np.ndarray, rtol: float, atol: float) -> tuple[bool, float, float, str]:
    """Like np.testing.assert_allclose; returns (ok, max |err|, worst err/tolerance, why)."""
    if got.shape != want.shape:
        return False, float("nan"), float("nan"), f"shape {list(got.shape)}, expected {list(want.shape)}"
    g = got.astype(np.float64)
    w = want.astype(np.float64)
    finite = np.isfinite(w)
    bad_nonfinite = ~finite & ~((np.isnan(w) & np.isnan(g)) | (g == w))
    if bad_nonfinite.any():
        idx = tuple(int(i) for i in np.argwhere(bad_nonfinite)[0])
        return False, float("inf"), float("inf"), f"at {list(idx)}: got {g[idx]}, expected {w[idx]}"
    if not finite.any():
        return True, 0.0, 0.0, ""
    err = np.abs(g[finite] - w[finite])
    if not np.isfinite(err).all():
        return False, float("inf"), float("inf"), "non-finite output where a finite value is expected"
    ratio = err / (atol + rtol * np.abs(w[finite]))
    max_abs = float(err.max()) if err.size else 0.0
    worst = float(ratio.max()) if ratio.size else 0.0
    return worst <= 1.0, max_abs, worst, ""


def run_case(binary: str, case_dir: str, base_dir: str | None, work: str, reference: bool) -> Result:
    name = os.path.basename(case_dir)
    res = Result(name)
    model = onnx.load(os.path.join(case_dir, "model.onnx"))
    node_model = model
    if attention_node(model) is None and base_dir is not None:
        node_model = onnx.load(os.path.join(base_dir, "model.onnx"))
        res.notes.append("node of " + os.path.basename(base_dir))
    node = attention_node(node_model)
    if node is None:
        res.notes.append("no single Attention node in model.onnx")
        return res
    opset = onnx_opset(node_model)
    res.opset = opset if opset is not None else "?"
    if opset not in SUPPORTED_OPSETS:
        res.status = "NOT RUN"
        res.notes.append(f"opset {opset}: sdpa onnx implements opsets {', '.join(map(str, SUPPORTED_OPSETS))}")
        return res

    sets = data_sets(case_dir)
    if not sets:
        res.notes.append("no test_data_set_*")
        return res
    args = [binary, "onnx", "--opset", str(opset)]
    if reference:
        args.append("--reference")
    for attr in node.attribute:
        flag = ATTRIBUTE_FLAGS.get(attr.name)
        if flag is None:
            res.notes.append(f"attribute {attr.name} has no flag")
            return res
        value = helper.get_attribute_value(attr)
        args += [flag, repr(float(value)) if attr.type == onnx.AttributeProto.FLOAT else str(int(value))]

    ok_all = True
    for set_name in sets:
        folder = os.path.join(case_dir, set_name)
        case_work = os.path.join(work, name, set_name)
        os.makedirs(case_work, exist_ok=True)
        graph_inputs = [i.name for i in model.graph.input]
        graph_outputs = [o.name for o in model.graph.output]
        arrays_in = {graph_inputs[j]: read_tensor(p) for j, p in enumerate(pb_files(folder, "input"))}
        arrays_out = {graph_outputs[j]: read_tensor(p) for j, p in enumerate(pb_files(folder, "output"))}
        run_args = list(args)
        widened = False
        for pos, input_name in enumerate(node.input):
            if not input_name:
                continue
            if pos >= len(INPUT_FLAGS):
                res.notes.append(f"input {pos} ({input_name}) has no flag")
                return res
            a = arrays_in[input_name]
            if BF16 is not None and a.dtype == BF16:
                a = a.astype(np.float32)  # exact
                widened = True
            path = os.path.join(case_work, f"in{pos}.npy")
            np.save(path, np.ascontiguousarray(a))
            run_args += [INPUT_FLAGS[pos], path]
        expected = {}
        for pos, output_name in enumerate(node.output):
            if not output_name:
                continue
            path = os.path.join(case_work, f"out{pos}.npy")
            run_args += [OUTPUT_FLAGS[pos], path]
            expected[pos] = (path, arrays_out[output_name])
        res.dtype = str(arrays_in[node.input[0]].dtype)
        if widened:
            res.notes.append("bfloat16 via float32 files")
        proc = subprocess.run(run_args, capture_output=True, text=True)
        if proc.returncode != 0:
            res.notes.append(f"exit {proc.returncode}: {proc.stderr.strip()}")
            return res
        worst_abs, worst_ratio = 0.0, 0.0
        for pos, (path, want) in expected.items():
            got = np.load(path)
            if widened and want.dtype == BF16:
                got = got.astype(BF16)  # round to nearest even, as a bfloat16 output would be
            if got.dtype != want.dtype:
                res.notes.append(f"{OUTPUT_FLAGS[pos]}: dtype {got.dtype}, expected {want.dtype}")
                ok_all = False
                continue
            rtol, atol = TOLERANCES.get(str(want.dtype), TOLERANCES["float32"])
            ok, max_abs, ratio, why = compare(got, want, rtol, atol)
            worst_abs = max(worst_abs, max_abs)
            worst_ratio = max(worst_ratio, ratio)
            if not ok:
                ok_all = False
                res.notes.append(f"{OUTPUT_FLAGS[pos]}: {why or f'max |err| {max_abs:.3g} exceeds tolerance'}")
        res.max_abs, res.worst_ratio = worst_abs, worst_ratio
    res.status = "pass" if ok_all else "FAIL"
    return res


# ---------------------------------------------------------------------------


def print_table(title: str, results: list[Result]) -> None:
    rows = [("case", "opset", "dtype", "status", "max |err|", "err/tol", "notes")]
    for r in results:
        rows.append(
            (
                r.name,
                str(r.opset),
                r.dtype,
                r.status,
                "" if r.max_abs is None else f"{r.max_abs:.2e}",
                "" if r.worst_ratio is None else f"{r.worst_ratio:.3f}",
                "; ".join(r.notes),
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    print(title)
    for k, row in enumerate(rows):
        print("  " + "  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row[:-1])) + ("  " + row[-1] if row[-1] else ""))
        if k == 0:
            print("  " + "  ".join("-" * w for w in widths))
    print()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("binary", help="the sdpa command-line binary")
    parser.add_argument("--data", help="read cases from this folder instead of generating them")
    parser.add_argument("--keep", help="generate into this folder and keep it (and the .npy files)")
    parser.add_argument("-k", dest="filter", default="", help="only cases whose name contains this text")
    parser.add_argument("--reference", action="store_true", help="run `sdpa onnx --reference` (the float64 oracle)")
    args = parser.parse_args()
    if not os.access(args.binary, os.X_OK):
        print(f"run_conformance.py: {args.binary}: not an executable", file=sys.stderr)
        return 2

    scratch = tempfile.mkdtemp(prefix="sdpa_onnx_conformance_")
    try:
        if args.data:
            data = args.data
        else:
            data = args.keep or os.path.join(scratch, "data")
            if args.keep and os.path.exists(args.keep):
                shutil.rmtree(args.keep)
            os.makedirs(data)
            generate(data)
        work = os.path.join(args.keep, "_npy") if args.keep else os.path.join(scratch, "npy")
        names = sorted(n for n in os.listdir(data) if n.startswith("test_attention") and args.filter in n)
        if not names:
            print("run_conformance.py: no test_attention* cases found", file=sys.stderr)
            return 1
        base_names = [n for n in names if "_expanded" not in n]
        expanded_names = [n for n in names if "_expanded" in n]
        results = [run_case(args.binary, os.path.join(data, n), None, work, args.reference) for n in base_names]
        twins = []
        for n in expanded_names:
            base = n.split("_expanded")[0]
            base_dir = os.path.join(data, base)
            twins.append(
                run_case(args.binary, os.path.join(data, n), base_dir if os.path.isdir(base_dir) else None, work, args.reference)
            )
    finally:
        shutil.rmtree(scratch, ignore_errors=True)

    print(f"ONNX Attention conformance: {args.binary} onnx{' --reference' if args.reference else ''} "
          f"(onnx {onnx.__version__}, numpy {np.__version__})\n")
    tol = ", ".join(f"{k} rtol {r:.3g} atol {a:.3g}" for k, (r, a) in TOLERANCES.items())
    print(f"tolerances: {tol}; err/tol <= 1 passes\n")
    print_table("Operator cases", results)
    if twins:
        print_table("_expanded cases (ONNX's function-body expansion of the same nodes, same data)", twins)

    everything = results + twins
    failed = [r for r in everything if r.status == "FAIL"]
    not_run = [r for r in everything if r.status == "NOT RUN"]
    passed = [r for r in everything if r.status == "pass"]
    print(
        f"summary: {sum(r.status == 'pass' for r in results)}/{len(results)} operator cases pass, "
        f"{sum(r.status == 'pass' for r in twins)}/{len(twins)} _expanded cases pass; "
        f"{len(passed)} pass, {len(failed)} fail, {len(not_run)} not run"
    )
    for r in not_run:
        print(f"  not run: {r.name}: {'; '.join(r.notes)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
