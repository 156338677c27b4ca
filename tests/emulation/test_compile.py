"""`torch.compile`d code on the emulated device: it runs (eagerly, fullgraph or not) and torch's
compiler is given back compiling afterwards. That its ops stay visible to the sanitizer is
tested on both devices in tests/sanitizer/test_gpu_path.py."""

from __future__ import annotations

import subprocess
import sys

import torch

from csan_lint.runtime import emulation


class CountingBackend:
    """A torch.compile backend that counts the graphs it is given and runs them as traced."""

    def __init__(self) -> None:
        self.graphs = 0

    def __call__(self, graph: torch.fx.GraphModule, example_inputs: list[torch.Tensor]):
        self.graphs += 1
        return graph.forward


def affine(x: torch.Tensor) -> torch.Tensor:
    return x * 2 + 1


def test_compiled_function_and_module_run_on_the_device(device):
    backend = CountingBackend()
    x = torch.arange(4.0, device="cuda")
    assert torch.equal(torch.compile(affine, backend=backend)(x).cpu(), torch.tensor([1.0, 3.0, 5.0, 7.0]))
    out = torch.compile(affine, fullgraph=True)(x)
    assert out.device.type == "cuda" and torch.equal(out.cpu(), torch.tensor([1.0, 3.0, 5.0, 7.0]))

    torch.manual_seed(0)
    linear = torch.nn.Linear(4, 3).cuda()
    expected = x @ linear.weight.T + linear.bias
    compiled = torch.compile(linear)
    result = compiled(x)
    assert result.device.type == "cuda" and torch.allclose(result, expected)
    result.sum().backward()
    assert linear.weight.grad is not None and linear.weight.grad.device.type == "cuda"
    assert backend.graphs == 0  # run eagerly: no graph was traced under the device's mode


def test_compiled_function_using_streams_runs_on_them(device):
    side = torch.cuda.Stream()

    def on_side(x: torch.Tensor) -> tuple[torch.Tensor, bool]:
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            y = x + 1
            was_side = torch.cuda.current_stream() == side
        torch.cuda.current_stream().wait_stream(side)
        return y, was_side

    y, was_side = torch.compile(on_side)(torch.zeros(3, device="cuda"))
    assert was_side and torch.equal(y.cpu(), torch.ones(3))
    assert torch.cuda.current_stream() == torch.cuda.default_stream()


def test_compiler_compiles_again_after_deactivate():
    backend = CountingBackend()
    with emulation.emulated():
        torch.compile(affine, backend=backend)(torch.ones(2, device="cuda"))
    assert backend.graphs == 0
    assert torch.equal(torch.compile(affine, backend=backend)(torch.ones(2)), torch.full((2,), 3.0))
    assert backend.graphs == 1


def test_first_compile_after_enable_runs_eagerly():
    # The repro in a fresh process: torch._dynamo is first imported under the sanitizer.
    script = (
        "import sys, torch, csan_lint.runtime as r\n"
        "assert 'torch._dynamo' not in sys.modules\n"
        "original = torch.compile\n"
        "with r.sanitize(device='emulated'):\n"
        "    print(torch.compile(lambda x: x * 2 + 1)(torch.ones(2, device='cuda')).tolist())\n"
        "print(torch.compile is original, torch.compiler.set_stance().prev.stance)\n"
    )
    done = subprocess.run([sys.executable, "-W", "ignore", "-c", script], capture_output=True, text=True, timeout=280)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["[3.0, 3.0]", "True default"]
