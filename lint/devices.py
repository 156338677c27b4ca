"""Where a tensor's memory lives, as far as the code says: on the host or on the device.

One statement of PyTorch's placement rules for both interpreters:
- a factory (`torch.zeros(n)`, `torch.tensor(v)`) without `device=` allocates on the default
  device: the host, unless `factories-allocate-on-the-device` (lint/analysis/assumptions.py)
  takes the default to be the GPU, as `torch.set_default_device("cuda")` makes it (code that
  moves it is not read); `torch.tensor(y)` of a tensor `y` goes where `y` lives;
  `pin_memory=True` is host memory;
- `*_like(x)` and `x.new_*()` allocate where `x` lives unless `device=` says otherwise;
- `.cpu()` and `.pin_memory()` give host memory, `.cuda()` device memory, and `.to(d)` goes where
  `d` says: a device (`"cpu"`, `"cuda:1"`, `torch.device("cpu")`, `y.device`, a name bound to
  one) or a tensor (`x.to(y)`: where `y` lives);
- `x.device` names where `x` lives; `x.to(torch.float16)`, `x.to(y.dtype)` convert where `x` lives;
- only host tensors have `pin_memory()` (a CUDA tensor raises): hostflow takes its receiver for
  host memory, so a non-blocking copy into it to a device the code does not name was a download.
Anything else is unknown (None): a parameter, the result of unknown code. The analyses ask
`place_of_result` of a call and `place_of_device` of a device argument, with what they know
of names (`known`: a tensor's place, or the place a name bound to a device names) and the
default device their assumptions give (`default_device`).
"""

from __future__ import annotations

from collections.abc import Callable
from enum import Enum

import libcst as cst

from csan_lint.lint.analysis import api
from csan_lint.lint.analysis.api import Direction, Kind
from csan_lint.lint.analysis.assumptions import FACTORIES_ON_DEVICE
from csan_lint.lint.names import ImportTable, dotted_name


class Place(Enum):
    HOST = "host"
    DEVICE = "device"


Known = Callable[[str], "Place | None"]
"""What the caller knows of a dotted name: the place of the tensor it names, or of the device."""

FACTORIES = frozenset(
    f"torch.{name}"
    for name in (
        "tensor", "zeros", "ones", "empty", "full", "arange", "range", "rand", "randn", "randint",
        "randperm", "linspace", "logspace", "eye", "empty_strided",
    )
)  # fmt: skip
"""Factories that allocate on the default device unless `device=` says otherwise."""
_FROM_DATA = frozenset({"torch.tensor", "torch.as_tensor"})
"""Factories whose result, given a tensor and no `device=`, lives where that tensor does."""
LIKE_FACTORIES = frozenset(
    f"torch.{name}" for name in ("zeros_like", "ones_like", "empty_like", "full_like", "rand_like", "randn_like")
)
"""Factories that allocate where their first argument lives unless `device=` says otherwise."""
_HOST_TYPES = frozenset({"cpu"})


def place_of_device(expr: cst.BaseExpression, imports: ImportTable, known: Known) -> Place | None:
    """The place a device argument names: `"cpu"`, `"cuda:0"`, `torch.device("cpu")`, `0` (a
    device index), `y.device`, or a name `known` says."""
    if isinstance(expr, cst.Call) and imports.qualified(expr.func) == "torch.device" and expr.args:
        expr = expr.args[0].value
    if isinstance(expr, cst.SimpleString):
        kind = str(expr.evaluated_value).partition(":")[0]
        return Place.HOST if kind in _HOST_TYPES else Place.DEVICE if kind == "cuda" else None
    if isinstance(expr, cst.Integer):
        return Place.DEVICE
    if isinstance(expr, cst.Attribute) and expr.attr.value == "device" and (owner := dotted_name(expr.value)):
        return known(owner)
    name = dotted_name(expr)
    return known(name) if name is not None else None


def default_device(holds: Callable[[str], bool]) -> Place:
    """Where a factory that names no device allocates, for both interpreters (`holds`: whether
    an assumption holds in this run)."""
    return Place.DEVICE if holds(FACTORIES_ON_DEVICE) else Place.HOST


def unknown_place(key: str) -> Place | None:
    """Where a name's memory lives, for a caller that knows no name's."""
    return None


def place_of_result(call: cst.Call, imports: ImportTable, known: Known, default_device: Place) -> Place | None:
    """Where the memory of a call's result lives, when the code says it (`default_device`: where
    a factory that names no device allocates)."""
    qualified = imports.qualified(call.func)
    device = _keyword(call, api.DEVICE_KEYWORD)
    if qualified in FACTORIES or qualified in LIKE_FACTORIES or qualified in _FROM_DATA:
        if _is_true(_keyword(call, api.PIN_MEMORY)):
            return Place.HOST
        if device is not None:
            return place_of_device(device, imports, known)
        first = dotted_name(call.args[0].value) if call.args and call.args[0].keyword is None else None
        if qualified in LIKE_FACTORIES:
            return known(first) if first is not None else None
        if qualified in _FROM_DATA and first is not None and known(first) is not None:
            return known(first)
        return default_device
    if qualified is not None or not isinstance(call.func, cst.Attribute):
        return None
    op = api.method_op(call.func.attr.value)[0]
    if op is None:
        return None
    if op.kind is not Kind.COPY:
        return None
    if op.direction in (Direction.TO_HOST, Direction.TO_PINNED):
        return Place.HOST
    if op.direction is Direction.TO_DEVICE:
        return Place.DEVICE
    target = device if device is not None else next((a.value for a in call.args if a.keyword is None), None)
    if target is not None and device is None and names_a_dtype(target, imports):
        receiver = dotted_name(call.func.value)  # `x.to(torch.float16)`: a cast, where `x` lives
        return known(receiver) if receiver is not None else None
    return place_of_device(target, imports, known) if target is not None else None


def placed_by_default(call: cst.Call, imports: ImportTable) -> bool:
    """Whether the call's result lives where the default device is (`torch.zeros(n)`): what
    an analysis that takes it for device memory rests on (`FACTORIES_ON_DEVICE`)."""
    places = {place_of_result(call, imports, unknown_place, default) for default in Place}
    return places == set(Place)


def is_upload(call: cst.Call, imports: ImportTable) -> bool:
    """`x.cuda()`, `x.to("cuda")`: a method that copies its receiver to the device, which the code
    names; the receiver is then host memory, as far as the code says."""
    if not isinstance(call.func, cst.Attribute) or imports.qualified(call.func) is not None:
        return False
    op = api.method_op(call.func.attr.value)[0]
    return (
        op is not None
        and op.kind is Kind.COPY
        and place_of_result(call, imports, unknown_place, Place.HOST) is Place.DEVICE
    )


DTYPES = frozenset(
    f"torch.{name}"
    for name in (
        "float", "float16", "float32", "float64", "half", "double", "bfloat16", "int", "int8",
        "int16", "int32", "int64", "long", "short", "uint8", "bool", "complex64", "complex128",
        "float8_e4m3fn", "float8_e5m2",
    )
)  # fmt: skip
"""torch's dtypes by name: `x.to(torch.float16)` converts where `x` lives."""


def names_a_dtype(expr: cst.BaseExpression, imports: ImportTable) -> bool:
    """`torch.float16`, `y.dtype`: a dtype, not a device."""
    if isinstance(expr, cst.Attribute) and expr.attr.value == "dtype":
        return True
    return imports.qualified(expr) in DTYPES


def _keyword(call: cst.Call, name: str) -> cst.BaseExpression | None:
    return next((arg.value for arg in call.args if arg.keyword is not None and arg.keyword.value == name), None)


def _is_true(expr: cst.BaseExpression | None) -> bool:
    return isinstance(expr, cst.Name) and expr.value == "True"


def allocated_on_host(call: cst.Call, imports: ImportTable, default_device: Place) -> bool:
    """`torch.empty(n, pin_memory=True)`, `torch.zeros(n, device="cpu")`, `torch.zeros(n)` where
    the default device is the host: a call of a tensor module the code (or the default device)
    says allocates host memory."""
    qualified = imports.qualified(call.func)
    if qualified in FACTORIES or qualified in _FROM_DATA:
        return place_of_result(call, imports, unknown_place, default_device) is Place.HOST
    for arg in call.args:
        keyword = arg.keyword.value if arg.keyword is not None else None
        if keyword == api.PIN_MEMORY and _is_true(arg.value):
            return True
        if keyword == api.DEVICE_KEYWORD and place_of_device(arg.value, imports, unknown_place) is Place.HOST:
            return True
    return False
