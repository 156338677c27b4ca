"""The torch internals the runtime relies on beyond torch's public API, checked when the
sanitizer is enabled: on a torch that lacks one (the runtime is tested on torch 2.13 and meant
for 2.11 and later), enable() fails with a message naming each missing one, rather than
checking half a program. docs/sanitizer.md lists them."""

from __future__ import annotations

import threading
from typing import Any

from csan_lint.runtime.gpu_trace import REGISTRY_NAMES

INTERNALS: tuple[tuple[str, str, bool], ...] = (
    ("torch._C._activate_gpu_trace", "switches the C++ side's trace callbacks on", True),
    *((f"torch.cuda._gpu_trace.{name}.callback_list", "a trace callback registry", False) for name in REGISTRY_NAMES),
    ("torch.utils._python_dispatch.TorchDispatchMode", "sees every op (the dispatch mode)", False),
    ("torch.utils._python_dispatch._disable_current_modes", "graph replay, the emulated device", False),
    ("torch.multiprocessing.reductions.StorageWeakRef", "tells a dead pinned block from a new one", False),
    ("torch._C._autograd._get_sequence_nr", "a forward op's autograd node, for backward attribution", False),
    ("torch._C._current_autograd_node", "the node a backward op runs for", False),
    ("torch.cuda.CUDAGraph.capture_begin", "graph capture (no trace callback)", False),
    ("torch.cuda.CUDAGraph.capture_end", "graph capture", False),
    ("torch.cuda.CUDAGraph.replay", "graph replay", False),
    ("torch.cuda.ExternalStream", "streams made outside torch", False),
    ("torch.Event.query", "torch.Event polls", False),
    ("torch.Event.wait", "torch.Event waits", False),
    ("torch.Stream.query", "torch.Stream polls", False),
    ("torch.Stream.wait_event", "torch.Stream waits", False),
    ("torch.Tensor.record_stream", "the caching allocator's record_stream", False),
)
"""(dotted path, what the runtime uses it for, whether only a real GPU needs it)."""

OPTIONAL = ("torch._C._cuda_getCurrentRawStream", "torch._C._cuda_getDevice", "torch.cuda.get_stream_from_external")
"""Used when present, with a public-API fallback (or nothing to wrap) otherwise."""

THREAD_BOOTSTRAP = "_bootstrap_inner"
"""threading.Thread's per-thread entry, wrapped so that new threads run under the mode."""


def _resolve(path: str) -> Any:
    import torch

    found: Any = torch
    for name in path.split(".")[1:]:
        found = getattr(found, name)
    return found


def missing(real_cuda: bool) -> list[str]:
    """The internals this torch lacks (those a real GPU needs only when `real_cuda`)."""
    absent = []
    for path, why, cuda_only in INTERNALS:
        if cuda_only and not real_cuda:
            continue
        try:
            _resolve(path)
        except (AttributeError, ImportError):
            absent.append(f"{path} ({why})")
    if not hasattr(threading.Thread, THREAD_BOOTSTRAP):
        absent.append(f"threading.Thread.{THREAD_BOOTSTRAP} (runs new threads under the mode)")
    return absent


def check(real_cuda: bool) -> None:
    """Raise a RuntimeError naming every internal this torch lacks."""
    absent = missing(real_cuda)
    if absent:
        import torch

        raise RuntimeError(
            f"csan: torch {torch.__version__} lacks what the sanitizer relies on: {'; '.join(absent)}. "
            "csan-lint supports torch 2.11 and later."
        )
