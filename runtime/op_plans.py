"""What an operator's schema says, worked out once per overload and shared by the two
dispatch modes that need it: the sanitizer's (which bytes a kernel reads and writes, which
ops sync the host) and the emulated device's (which results are new device memory, which
arguments an in-place op writes, which ops draw random numbers).

The host-syncing ops are one list for both, in cuda_semantics.py (with why each syncs).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import torch
from torch._ops import OpOverload

from csan_lint.runtime.cuda_semantics import HOST_SYNC_OPS, MASK_INDEX_OPS

KERNEL, COPY, HOST_SYNC, SKIP, ALLOCATE = range(5)
"""How the sanitizer sees an op: a kernel, a copy (host<->device or on the device), a kernel
after which the host waits for the current stream, no device work at all, or an allocation
that launches nothing (its block's earlier use on the allocating stream is what the tracker
records)."""

RESULT = "output"
"""The argument name of a fresh result (schema returns are mostly unnamed)."""

_MASK_DTYPES = (torch.bool, torch.uint8)

# Ops that only read their inputs' metadata (CSAN's rule): `new_empty(x)`, `empty_like(x)`.
_FACTORY = re.compile(r"(new_.*|.*_like)$")

# Ops that are not device work (bookkeeping, metadata) and are never kernels.
_NOT_KERNELS = frozenset(
    {
        "aten::record_stream",  # handled where torch exposes it (Tensor.record_stream)
        "aten::set_",  # re-points the tensor at a storage: later accesses through it are the storage's
        "aten::is_pinned",
        "aten::_has_compatible_shallow_copy_type",
        "aten::size",
        "aten::stride",
        "aten::sym_size",
        "aten::sym_stride",
        "aten::sym_numel",
        "aten::sym_storage_offset",
        "prim::device",
    }
)
_COPIES = frozenset({"aten::copy_", "aten::_to_copy", "aten::_copy_from", "aten::copy"})
_ALLOCATION_ONLY_OPS = frozenset(
    {
        "aten::empty",
        "aten::empty_like",
        "aten::new_empty",
        "aten::empty_strided",
        "aten::new_empty_strided",
        "aten::empty_permuted",
    }
)


class OpPlan:
    """One overload's schema, read once."""

    __slots__ = (
        "_mask_index",
        "_spared_by",
        "call",
        "fresh",
        "kind",
        "non_blocking_position",
        "operator",
        "overload",
        "pointwise",
        "seeded",
        "single_return",
        "slots",
        "writes",
    )

    def __init__(self, func: Any) -> None:
        schema = func._schema
        # Held so that an id keying a plan cache stays this overload's (a custom op can die).
        self.overload = func
        # The overload's own C++ callable (an OpOverload's __call__ is one more Python frame
        # that only forwards to it), or the overload itself for another kind of operator.
        self.call: Callable[..., Any] = func._op if type(func) is OpOverload else func
        self.operator: str = func.name()
        base = self.operator.split(".", 1)[0]
        self.single_return = len(schema.returns) == 1
        # Only results that alias no input are new allocations.
        self.fresh = all(ret.alias_info is None for ret in schema.returns)
        self.pointwise = torch.Tag.pointwise in func.tags
        self.seeded = torch.Tag.nondeterministic_seeded in func.tags
        self.slots, self.non_blocking_position = _slots(schema)
        self.writes = _written_arguments(schema)
        spared_by = HOST_SYNC_OPS.get(base)
        self._spared_by = _argument_position(schema, spared_by) if spared_by else None
        self._mask_index = base in MASK_INDEX_OPS
        if base in _NOT_KERNELS or not self.slots:
            self.kind = SKIP  # bookkeeping, or a view: it touches no data
        elif base in _COPIES:
            self.kind = COPY
        elif base in HOST_SYNC_OPS or self._mask_index:
            self.kind = HOST_SYNC
        elif base in _ALLOCATION_ONLY_OPS:
            self.kind = ALLOCATE
        else:
            self.kind = KERNEL

    def syncs_host(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
        """Whether this call of a HOST_SYNC op makes the host wait for the current stream."""
        if self._mask_index:
            indices = args[1] if len(args) > 1 else kwargs.get("indices", ())
            return any(isinstance(index, torch.Tensor) and index.dtype in _MASK_DTYPES for index in indices or ())
        if self._spared_by is not None:
            position, name = self._spared_by
            given = args[position] if position < len(args) else kwargs.get(name)
            return given is None
        return True


def _argument_position(schema: Any, name: str) -> tuple[int, str]:
    for position, argument in enumerate(schema.arguments):
        if argument.name == name:
            return position, name
    return len(schema.arguments), name  # not in this overload: never given


def _slots(schema: Any) -> tuple[tuple[tuple[int, str, bool, bool, bool], ...], int]:
    """(position, name, is_write, is_output, is_result) of each tensor the kernel touches: the
    arguments whose data it reads or writes (is_output: the op returns it, written in place or
    `out=`; metadata-only ones are left out), then the fresh tensors it returns (position in
    the result; not views, not inputs), written. And the position of `non_blocking` (-1: none)."""
    is_factory = bool(_FACTORY.match(schema.name.split("::", 1)[-1]))
    returned: set[str] = set()
    fresh_returns = []
    for position, ret in enumerate(schema.returns):
        alias = ret.alias_info
        if alias is None:
            if "Tensor" in str(ret.type):  # not `.item()`'s number
                fresh_returns.append(position)
        elif alias.is_write:
            returned |= alias.before_set
    inputs = []
    non_blocking_position = -1
    for position, argument in enumerate(schema.arguments):
        if argument.name == "non_blocking":
            non_blocking_position = position
        if "Tensor" not in str(argument.type):
            continue  # ints, scalars, dtypes: no memory
        alias = argument.alias_info
        is_write = alias is not None and alias.is_write
        reads = not is_factory and (alias is None or alias.is_write)
        if is_write or reads:
            is_output = is_write and bool(alias.before_set & returned)
            inputs.append((position, argument.name, is_write, is_output, False))
    results = tuple((position, RESULT, True, True, True) for position in fresh_returns)
    return (*inputs, *results), non_blocking_position


def _written_arguments(schema: Any) -> tuple[tuple[int, str], ...] | None:
    """For ops that write their inputs and return them (in place, out=): which argument each
    result is (so a graph capture can defer the write to replay); None for other ops."""
    returns = schema.returns
    if not returns or not all(ret.alias_info is not None and ret.alias_info.is_write for ret in returns):
        return None
    written = []
    for ret in returns:
        for position, argument in enumerate(schema.arguments):
            alias = argument.alias_info
            if alias is not None and alias.before_set == ret.alias_info.before_set:
                written.append((position, argument.name))
                break
    return tuple(written) if len(written) == len(returns) else None


PLANS: dict[int, OpPlan] = {}
"""Plans by id of their overload (read directly on hot paths)."""


def plan_of(func: Any) -> OpPlan:
    """The plan of an overload, made on first use. Keyed by id: an OpOverload hashes in Python
    (~0.3 us an op); the plan holds the overload, so the id stays its own."""
    plan = PLANS.get(id(func))
    if plan is None:
        plan = PLANS[id(func)] = OpPlan(func)
    return plan
