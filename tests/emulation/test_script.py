"""TorchScript under the emulated device: the replaced factories (`torch.tensor`, ...) are
Python that TorchScript cannot compile, so it must keep compiling them as their aten ops
(`import torch.distributed.optim` scripts such code at import)."""

from __future__ import annotations

import torch
from torch.jit._builtins import _find_builtin

from csan_lint.runtime import emulation


def test_scripted_code_calling_the_replaced_factories_compiles_and_runs(device):
    @torch.jit.script
    def scripted(x: torch.Tensor) -> torch.Tensor:
        return torch.tensor(1.0) + torch.as_tensor(x) + torch.zeros_like(x)

    assert scripted(torch.ones(2)).tolist() == [2.0, 2.0]
    assert torch.tensor([1.0], device="cuda").is_cuda  # eager code still gets the device


def test_script_builtins_are_given_back_on_deactivate():
    original = torch.tensor
    emulation.activate()
    replacement = torch.tensor
    assert replacement is not original and _find_builtin(replacement) == "aten::tensor"
    emulation.deactivate()
    assert _find_builtin(replacement) is None
    assert _find_builtin(original) == "aten::tensor"


def test_scripted_code_annotated_with_torch_device_compiles(device):
    """`torch.device` is replaced (for bare indices): TorchScript must still know the type."""

    @torch.jit.script
    def to(x: torch.Tensor, target: torch.device) -> torch.Tensor:
        return x.to(target)

    assert to(torch.ones(1), torch.device("cpu")).tolist() == [1.0]
