"""Which torch.cuda API a name in the source means, however torch was imported or spelled.

LibCST's QualifiedNameProvider answers this too, but costs about eight parses per file; the
linter needs a dozen names, so a table of the module's own import aliases is enough and
costs nothing beyond visiting the import statements.

Every spelling of the stream API is answered with its `torch.cuda` name, so the analyses know
one name per meaning: the device-generic `torch.Stream`/`torch.Event`/`torch.accelerator.*`,
an accelerator object (DeepSpeed's `get_accelerator()`, `torch.get_device_module()`, also bound
to a name first: `accel = get_accelerator()`), and a project's own wrappers (`Spellings`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

import libcst as cst

STREAM_CONTEXTS = frozenset({"torch.cuda.stream", "torch.cuda.StreamContext"})
"""Calls whose value, used in `with`, makes their stream argument current for the block."""
STREAM_CONSTRUCTORS = frozenset({"torch.cuda.Stream", "torch.cuda.ExternalStream"})
CURRENT_STREAM = "torch.cuda.current_stream"
DEFAULT_STREAM = "torch.cuda.default_stream"
EVENT_CONSTRUCTORS = frozenset({"torch.cuda.Event"})
DEVICE_SYNC = "torch.cuda.synchronize"
SET_STREAM = "torch.cuda.set_stream"
GRAPH_CAPTURE = "torch.cuda.graph"
"""A `with` on it captures a CUDA graph on a side stream, after synchronizing the device."""

_DEVICE_HANDLE = re.compile(r"(?:^|\.)_?device_(?:handle|module)$")
"""Device-generic code (FSDP, DCP) reaches torch.cuda through an object named like
`state._device_handle` or `self.device_module`: `torch.get_device_module(device)` at run time."""
_CANONICAL_MODULES = {
    "torch.cuda.streams": "torch.cuda",
    "torch.cuda.graphs": "torch.cuda",
    "torch.accelerator": "torch.cuda",
    "torch.accelerator.graphs": "torch.cuda",
}
"""Modules whose names mean torch.cuda's: `torch.cuda.streams.Stream` is `torch.cuda.Stream`, and
`torch.accelerator.current_stream()` is the CUDA one on a CUDA device."""
_CANONICAL_NAMES = {
    "torch.Stream": "torch.cuda.Stream",
    "torch.Event": "torch.cuda.Event",
    "torch.cuda.Graph": "torch.cuda.CUDAGraph",
}
"""The device-generic classes (`torch.accelerator.Graph` lands on `torch.cuda.Graph` first)."""
ACCELERATOR_FACTORIES = frozenset(
    {
        "deepspeed.accelerator.get_accelerator",
        "deepspeed.accelerator.real_accelerator.get_accelerator",
        "torch.get_device_module",
    }
)
"""Calls returning an object whose methods are torch.cuda's: `get_accelerator().Stream()`."""
_ACCELERATOR_METHODS = {"capture_to_graph": "graph", "create_graph": "CUDAGraph"}
"""DeepSpeed accelerator methods named unlike their torch.cuda counterparts."""


@dataclass(frozen=True)
class Spellings:
    """A project's own wrappers of the stream API (`[tool.csan-lint]` settings): dotted callables,
    matched against the name as imported (`pkg.cuda_utils.on_stream`) or as written (`self.on_stream`)."""

    stream_contexts: tuple[str, ...] = ()
    """Calls whose value, used in `with`, makes their stream argument current."""
    current_stream: tuple[str, ...] = ()
    """Calls returning the current stream."""
    stream_factories: tuple[str, ...] = ()
    """Calls returning a new stream."""
    event_factories: tuple[str, ...] = ()
    """Calls returning a new event."""

    def meanings(self) -> dict[str, str]:
        """Each wrapper -> the torch.cuda name it means."""
        return {
            **dict.fromkeys(self.stream_contexts, "torch.cuda.stream"),
            **dict.fromkeys(self.current_stream, CURRENT_STREAM),
            **dict.fromkeys(self.stream_factories, "torch.cuda.Stream"),
            **dict.fromkeys(self.event_factories, "torch.cuda.Event"),
        }

    def leaves(self) -> frozenset[str]:
        """The last component of every wrapper: the words a file must contain to use one."""
        return frozenset(name.rpartition(".")[2] for name in self.meanings())


NO_SPELLINGS = Spellings()


class ImportTable:
    """Local name -> dotted name it was imported as, for the imports seen in one module.

    A name bound by two different imports is dropped: guessing would trade precision for recall.
    Relative imports are not resolved (the module's package is unknown to a pure function).
    """

    def __init__(self, spellings: Spellings = NO_SPELLINGS) -> None:
        self._aliases: dict[str, str] = {}
        self._ambiguous: set[str] = set()
        self._project: Mapping[str, str] = spellings.meanings()
        self._handles: set[str] = set()
        """Dotted names bound to an accelerator object (`accel = get_accelerator()`)."""

    def add(self, node: cst.Import | cst.ImportFrom | cst.Assign) -> None:
        """Learns the names an import binds, or that an assignment binds an accelerator object."""
        if isinstance(node, cst.Assign):
            if isinstance(node.value, cst.Call) and self.qualified(node.value.func) in ACCELERATOR_FACTORIES:
                self._handles.update(key for target in node.targets if (key := dotted_name(target.target)))
            return
        if isinstance(node, cst.Import):
            for alias in node.names:
                dotted = dotted_name(alias.name)
                if dotted is None:
                    continue
                if alias.asname is not None:
                    self._bind(_asname(alias), dotted)
                else:
                    root = dotted.split(".", 1)[0]
                    self._bind(root, root)
            return
        if node.relative or node.module is None or isinstance(node.names, cst.ImportStar):
            return
        module = dotted_name(node.module)
        if module is None:
            return
        for alias in node.names:
            name = dotted_name(alias.name)
            if name is not None:
                local = _asname(alias) if alias.asname is not None else name
                self._bind(local, f"{module}.{name}")

    def _bind(self, local: str, dotted: str) -> None:
        if local in self._ambiguous:
            return
        previous = self._aliases.setdefault(local, dotted)
        if previous != dotted:
            del self._aliases[local]
            self._ambiguous.add(local)

    @property
    def names(self) -> frozenset[str]:
        """The local names the imports bind."""
        return frozenset(self._aliases)

    @property
    def imports_torch(self) -> bool:
        """Without a torch import no stream API can be named, so nothing needs analysing."""
        return any(target == "torch" or target.startswith("torch.") for target in self._aliases.values())

    def qualified(self, expr: cst.BaseExpression) -> str | None:
        """`tc.stream` -> `torch.cuda.stream` under `import torch.cuda as tc`; None if not imported.
        Other spellings of the stream API answer their torch.cuda name (see the module's doc)."""
        dotted = dotted_name(expr)
        if dotted is None:
            return self._through_accelerator(expr)
        if dotted in self._project:
            return self._project[dotted]
        root, _, rest = dotted.partition(".")
        target = self._aliases.get(root)
        if target is None:
            module, _, leaf = dotted.rpartition(".")
            return _accelerator_member(leaf) if module in self._handles or _DEVICE_HANDLE.search(module) else None
        full = f"{target}.{rest}" if rest else target
        if full in self._project:
            return self._project[full]
        module, _, leaf = full.rpartition(".")
        full = f"{_CANONICAL_MODULES.get(module, module)}.{leaf}" if module else full
        return _CANONICAL_NAMES.get(full, full)

    def _through_accelerator(self, expr: cst.BaseExpression) -> str | None:
        """`get_accelerator().stream` -> `torch.cuda.stream`; None for any other expression."""
        if isinstance(expr, cst.Attribute) and isinstance(expr.value, cst.Call):
            if self.qualified(expr.value.func) in ACCELERATOR_FACTORIES:
                return _accelerator_member(expr.attr.value)
        return None


def _accelerator_member(name: str) -> str:
    return f"torch.cuda.{_ACCELERATOR_METHODS.get(name, name)}"


def _asname(alias: cst.ImportAlias) -> str:
    assert alias.asname is not None
    name = alias.asname.name
    return name.value if isinstance(name, cst.Name) else ""


def dotted_name(expr: cst.BaseExpression) -> str | None:
    """`a.b.c` for a chain of names and attributes, None for anything else."""
    parts: list[str] = []
    while isinstance(expr, cst.Attribute):
        parts.append(expr.attr.value)
        expr = expr.value
    if not isinstance(expr, cst.Name):
        return None
    parts.append(expr.value)
    return ".".join(reversed(parts))
