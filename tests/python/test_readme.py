"""The README's Python training-loop example runs as written (a shorter loop)."""

import pathlib
import re

import pytest

torch = pytest.importorskip("torch")

README = pathlib.Path(__file__).resolve().parents[2] / "README.md"


def test_training_loop_example_runs():
    if not README.exists():
        pytest.skip("README.md is not beside the tests")
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), flags=re.S)
    example = next((b for b in blocks if "class Block" in b and "loss.backward()" in b), None)
    assert example is not None, "the README's training-loop example is missing"
    example = example.replace("range(10)", "range(2)")
    scope = {}
    exec(compile(example, "README.md (training loop)", "exec"), scope)
    model = scope["model"]
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in model.parameters())
