"""The vocabulary of tensor code: which torch calls, tensor methods and builtins launch work,
only look at metadata, allocate, hand a tensor on, or store it. values.py decides from these
what an expression is; the other analysis modules ask the same questions of them."""

from __future__ import annotations

import builtins

from csan_lint.lint.analysis import api
from csan_lint.lint.analysis.api import Direction, Kind, Receiver

HOST_METHODS = frozenset(
    {
        "size", "dim", "ndimension", "numel", "nelement", "element_size", "stride",
        "storage_offset", "data_ptr", "is_contiguous", "get_device", "is_pinned",
        "register_hook", "requires_grad_", "retain_grad", "untyped_storage", "is_floating_point",
        "is_complex", "__len__",
    }
)  # fmt: skip
"""Tensor methods that read metadata only: no kernel touches the data."""
HOST_ATTRIBUTES = frozenset(
    {
        "shape", "dtype", "device", "ndim", "is_cuda", "requires_grad", "grad_fn", "layout",
        "is_leaf", "names", "is_sparse", "is_quantized", "itemsize", "nbytes",
    }
)  # fmt: skip
"""Tensor attributes that are metadata: reading one reads no data."""
METADATA = HOST_METHODS | HOST_ATTRIBUTES
"""A tensor's methods and attributes that look at it without reading its data."""
AUTOGRAD_BOOKKEEPING = frozenset({"save_for_backward", "mark_dirty", "mark_non_differentiable"})
"""Methods of an autograd function's `ctx` that keep tensors for later, reading none of their data."""
GRADIENT = "grad"
"""The attribute a tensor's gradient lives by: rebinding it drops the gradient."""
TENSOR_ATTRIBUTES = frozenset({GRADIENT, "data"})
"""Attributes that hold a tensor of any tensor (or are None): `p.grad`, `p.data`."""
SYNC_METHODS = api.methods(Receiver.TENSOR, kinds=(Kind.HOST_SYNC,)) | {
    m.name for m in api.METHODS if m.receiver is Receiver.TENSOR and m.op.direction is Direction.TO_HOST
}
"""Reading a device tensor on the host waits for the current stream."""
HOST_ONLY_METHODS = frozenset(
    m.name for m in api.METHODS if m.receiver is Receiver.TENSOR and m.op.direction is Direction.TO_PINNED
)
"""Methods only a host tensor has (a CUDA tensor raises): their receiver is host memory."""
VIEW_METHODS = frozenset(
    {
        "view", "view_as", "reshape", "reshape_as", "expand", "expand_as", "transpose", "t",
        "permute", "narrow", "select", "squeeze", "unsqueeze", "flatten", "unflatten", "unfold",
        "chunk", "split", "tensor_split", "unbind", "as_strided", "detach", "diagonal", "movedim",
        "swapaxes", "contiguous", "numpy",
    }
)  # fmt: skip
"""Methods whose result may share storage with the receiver: an alias, not a new tensor
(`.numpy()` too: the host read is where the array is read)."""
VIEW_ATTRIBUTES = frozenset({"T", "mT", "H", "mH", "data", "real", "imag"})
TENSOR_METHODS = frozenset(
    {
        "to", "cuda", "clone", "float", "half", "bfloat16", "double", "long", "int", "bool",
        "sum", "mean", "matmul", "mm", "bmm", "add", "sub", "mul", "div", "pow", "exp", "abs",
        "max", "min", "softmax", "relu", "new_empty", "new_zeros", "new_ones", "new_full",
        "new_tensor", "pin_memory",
    }
)  # fmt: skip
"""Methods that return a fresh tensor whatever their receiver is."""
PURE_BUILTINS = frozenset(
    {
        "len", "int", "float", "bool", "str", "bytes", "isinstance", "issubclass", "hasattr",
        "id", "type", "print", "repr", "format", "hash", "abs", "round", "callable", "any", "all",
        "range", "divmod", "ord", "chr",
    }
)  # fmt: skip
"""Builtins that neither return a tensor nor keep their arguments alive."""
CONTAINER_BUILTINS = frozenset({"list", "tuple", "set", "frozenset", "dict"})
"""Builtins that build a container, never a tensor (the items they are given stay alive in it)."""
METADATA_BUILTINS = frozenset({"len", "isinstance", "issubclass", "hasattr", "id", "type", "callable"})
"""Builtins that look at a tensor without launching work on it."""
SYNC_BUILTINS = frozenset({"int", "float", "bool", "str", "repr", "format", "print"})
"""Builtins that copy a device tensor argument's value to the host, waiting for the current
stream: `int`/`float`/`bool` call `.item()`; `str`/`repr`/`format`/`print` format the tensor,
which torch does from a copy on the host."""
DATA_BUILTINS = SYNC_BUILTINS | frozenset(
    {
        "list", "tuple", "set", "dict", "sum", "max", "min", "sorted", "abs", "round", "iter",
        "next", "enumerate", "zip", "map", "any", "all", "bytes", "complex",
    }
)  # fmt: skip
"""Builtins that read their arguments' data on the host: convert, format, iterate or reduce it."""
BUILTINS = frozenset(dir(builtins))
"""Python's builtins: none reads a tensor's data unless DATA_BUILTINS names it."""
OUT_KEYWORD = "out"
"""The keyword of a torch op's output tensor: written, not read."""
TENSOR_MODULES = ("torch", "torch.nn.functional", "torch.fft", "torch.linalg", "torch.special")
HOST_TORCH = frozenset(
    {
        "torch.is_tensor", "torch.numel", "torch.Size", "torch.device", "torch.dtype",
        "torch.get_default_dtype", "torch.is_grad_enabled", "torch.no_grad", "torch.enable_grad",
        "torch.is_floating_point", "torch.is_complex", "torch.finfo", "torch.iinfo",
        "torch.manual_seed", "torch.set_grad_enabled", "torch.inference_mode",
        "torch.save", "torch.load",  # a file or a buffer, not a tensor operand
    }
)  # fmt: skip
STORING_METHODS = frozenset(
    {
        "append", "extend", "insert", "appendleft", "extendleft", "put", "put_nowait", "setdefault",
        "update", "push", "add", "enqueue", "set_result",
    }
)  # fmt: skip
"""Container methods: what is passed to them outlives the call (`Tensor.add` loses no precision
worth having)."""
UPLOAD_METHODS = frozenset(
    m.name
    for m in api.METHODS
    if m.op.kind is Kind.COPY and not m.op.in_place and m.op.direction in (Direction.TO_DEVICE, Direction.EITHER)
)
"""`.to(device)` / `.cuda()`: of a host buffer, a copy in stream order, not a host read."""
STREAM_WAITS = api.methods(Receiver.STREAM, kinds=(Kind.WAIT,))
"""A stream's waits: on another stream, on an event."""
ORDERING_METHODS = api.methods(Receiver.STREAM, Receiver.EVENT, Receiver.STREAM_OR_EVENT)
"""Methods of streams and events that order work or ask after it: what they take is a stream or an
event, and they launch nothing."""
COLLECTIVES = api.names(Kind.LAUNCH)
"""Collectives that write their first argument in place, in order with the current stream."""
BARRIERS = frozenset(f.name for f in api.FUNCTIONS if f.op == api.HOST_READ)
"""Return once the current stream's work is done: NCCL's barrier synchronizes the current stream
with the host, and DeepSpeed's calls torch's."""
CONTAINER_METHODS = frozenset(
    {
        "items", "keys", "values", "get", "setdefault", "pop", "popitem", "append", "extend",
        "insert", "remove", "clear", "count", "index", "update", "appendleft", "popleft",
    }
)  # fmt: skip
"""Methods of dicts, lists and deques that tensors do not have (but sparse ones' `.values()`):
the receiver is a container."""
ALLOCATORS = api.names(Kind.ALLOC)
ALLOCATING_METHODS = api.methods(Receiver.TENSOR, kinds=(Kind.ALLOC,))
"""Calls that allocate memory and launch no kernel: no data is written."""
SHAPED_LIKE = frozenset(f"torch.{kind}_like" for kind in ("empty", "zeros", "ones", "full", "rand", "randn", "randint"))
"""Calls that read only their first argument's metadata (shape, dtype, device), never its data."""
HOST_TENSORS = frozenset({"torch.from_numpy", "torch.frombuffer"})
"""Tensors that share host memory with a Python object: no stream writes them."""
