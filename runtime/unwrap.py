"""Tensors with no storage of their own (sparse, nested/jagged, DTensor and other wrapper
subclasses, FakeTensor): the sanitizer checks the dense tensors they are made of, and skips
(saying so once, by the caller) those it cannot see into. It never stops checking for them.

A wrapper subclass's op reaches a dispatch mode once, with the wrapper as argument; the ops
its `__torch_dispatch__` runs on the inner tensors do not reach the mode again. So the op is
taken to touch the inner tensors, read or written as the wrapper is: traceable subclasses
name them (`__tensor_flatten__`), sparse layouts expose their index and value tensors.
"""

from __future__ import annotations

from typing import Any

import torch

_SPARSE_PARTS = {
    torch.sparse_coo: ("_indices", "_values"),
    torch.sparse_csr: ("crow_indices", "col_indices", "values"),
    torch.sparse_bsr: ("crow_indices", "col_indices", "values"),
    torch.sparse_csc: ("ccol_indices", "row_indices", "values"),
    torch.sparse_bsc: ("ccol_indices", "row_indices", "values"),
}


def _parts(tensor: torch.Tensor, skipped: set[str]) -> list[torch.Tensor] | None:
    """The dense tensors `tensor` is made of; None when it is dense itself."""
    names = _SPARSE_PARTS.get(tensor.layout)
    if names is not None:
        return [getattr(tensor, name)() for name in names]
    if type(tensor) is torch.Tensor:
        return None
    flatten = getattr(tensor, "__tensor_flatten__", None)
    if flatten is not None:
        inner = [getattr(tensor, name) for name in flatten()[0]]
        return [part for value in inner if isinstance(value, torch.Tensor) for part in _dense(value, skipped)]
    try:
        tensor.untyped_storage().data_ptr()
    except Exception:
        skipped.add(type(tensor).__name__)  # opaque: a wrapper that names no inner tensors
        return []
    return None  # a subclass with storage (nn.Parameter and the like)


def _dense(tensor: torch.Tensor, skipped: set[str]) -> list[torch.Tensor]:
    parts = _parts(tensor, skipped)
    return [tensor] if parts is None else parts


def _replace(value: Any, skipped: set[str]) -> Any:
    if isinstance(value, torch.Tensor):
        parts = _parts(value, skipped)
        return value if parts is None else parts
    if isinstance(value, (list, tuple)) and any(isinstance(item, torch.Tensor) for item in value):
        return [
            part for item in value for part in (_dense(item, skipped) if isinstance(item, torch.Tensor) else (item,))
        ]
    return value


def unwrap_call(
    args: tuple[Any, ...], kwargs: dict[str, Any], out: Any
) -> tuple[tuple[Any, ...], dict[str, Any], Any, set[str]]:
    """The call with each storage-less tensor replaced by the list of its dense parts (an
    argument that was one tensor becomes a list), and the type names of those skipped."""
    skipped: set[str] = set()
    args = tuple(_replace(value, skipped) for value in args)
    kwargs = {name: _replace(value, skipped) for name, value in kwargs.items()}
    if isinstance(out, torch.Tensor):
        out = _replace(out, skipped)
    elif isinstance(out, (list, tuple)):
        out = tuple(_replace(value, skipped) for value in out)
    return args, kwargs, out, skipped


def has_storage_less(args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """Whether a sparse tensor is among the arguments (what made an op's bookkeeping fail)."""
    for value in (*args, *kwargs.values()):
        items = value if isinstance(value, (list, tuple)) else (value,)
        for item in items:
            if isinstance(item, torch.Tensor) and item.layout in _SPARSE_PARTS:
                return True
    return False
