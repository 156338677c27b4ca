"""`torch.compile`d code runs eagerly while the sanitizer or the emulated device is active.

Both are `TorchDispatchMode`s, and torch.compile cannot trace under one: it skips the compiled
frame (and fails `fullgraph=True` for finding nothing to compile), then, the mode being off
inside its own `__torch_dispatch__`, tries to compile that frame instead, which dies in the
emulation's patched `torch.cuda` functions. The compiler's public "force_eager" stance runs every
compiled function as plain Python instead: its ops all reach the dispatch modes, so the sanitizer
checks them and the emulated device runs them, as the eager program would.

Importing `torch._dynamo` costs seconds, so a process that has not imported it yet gets the
stance from its first `torch.compile` call.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import torch

from csan_lint.runtime.patches import Patches


def run_eagerly(patches: Patches) -> None:
    """Compiled functions run eagerly until `patches` are restored (the stance is given back)."""
    if "torch._dynamo" in sys.modules:
        _force_eager(patches)
        return
    forced = False

    def forcing(compile: Callable[..., Any]) -> Callable[..., Any]:
        def eager_compile(*args: Any, **kwargs: Any) -> Any:
            nonlocal forced
            compiled = compile(*args, **kwargs)  # imports torch._dynamo
            if not forced:
                _force_eager(patches)
                forced = True
            return compiled

        return eager_compile

    patches.wrap(torch, "compile", forcing)


def _force_eager(patches: Patches) -> None:
    stance = torch.compiler.set_stance("force_eager")  # set now; its __exit__ sets the previous one
    patches.on_restore(lambda: stance.__exit__(None, None, None))
