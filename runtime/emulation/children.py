"""Processes started by `torch.multiprocessing.spawn` / `start_processes` (the multi-process
tests of FSDP/OSS-style suites): a spawned child is a fresh interpreter that never activates
the emulated device, so its first `.cuda()` fails with "Torch not compiled with CUDA enabled".
The function each child runs is wrapped to turn the device on first. Only the device: races in
a child are not checked (the sanitizer runs in the parent). A forked child inherits it all.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

import torch.multiprocessing


class EmulatedChild:
    """`fn` run with the emulated device on; pickled by reference, as `fn` is."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.fn = fn

    def __call__(self, *args: Any) -> Any:
        from csan_lint.runtime import emulation

        emulation.activate()
        return self.fn(*args)


def starting_emulated(start_processes: Callable[..., Any]) -> Callable[..., Any]:
    """`start_processes` whose children (unless forked) run on the emulated device."""

    def start(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        method = kwargs.get("start_method", args[4] if len(args) > 4 else "spawn")
        if method != "fork":
            fn = EmulatedChild(fn)
        return start_processes(fn, *args, **kwargs)

    return start


def patches() -> list[tuple[Any, str, Any]]:
    """mp.spawn calls its own module's `start_processes`: that one and the public one."""
    spawn_module = importlib.import_module("torch.multiprocessing.spawn")  # the attribute is the function
    start = starting_emulated(spawn_module.start_processes)
    return [(torch.multiprocessing, "start_processes", start), (spawn_module, "start_processes", start)]
