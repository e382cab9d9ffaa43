"""`python -m sdpa.bench` and what `import sdpa` loads, each in a fresh interpreter."""

import os
import subprocess
import sys

import pytest

pytest.importorskip("torch")


def _python(args, env_changes=None):
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    env.update(env_changes or {})
    r = subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_import_sdpa_does_not_import_torch():
    out = _python(["-c", "import sys, numpy as np, sdpa\n"
                         "q = np.ones((1, 1, 3, 4), np.float32)\n"
                         "print(sdpa.scaled_dot_product_attention(q, q, q).shape, 'torch' in sys.modules)"])
    assert out.split() == ["(1,", "1,", "3,", "4)", "False"]


BENCH = ["-m", "sdpa.bench", "--n", "40", "--d", "16", "--causal", "no", "--nkv", "--no-backward", "--repeats", "1"]


def test_bench_sets_a_passive_wait_policy_before_torch_loads():
    out = _python(BENCH)
    assert "OpenMP wait policy of torch's threads: PASSIVE (set by the bench" in out
    assert "prefill H=8/8 N=40x40 d=16" in out


def test_bench_keeps_torch_default_or_the_callers_policy():
    assert "torch's default (workers spin" in _python(BENCH + ["--omp-wait", "torch"])
    assert "ACTIVE (from the environment)" in _python(BENCH, {"OMP_WAIT_POLICY": "ACTIVE"})
    # torch imported first: the bench cannot change the policy and says so.
    out = _python(["-c", "import sys, torch, sdpa.bench\nsys.exit(sdpa.bench.main(sys.argv[1:]))", *BENCH[2:]])
    assert "torch was imported before the bench could set OMP_WAIT_POLICY" in out
