"""Which torch.cuda API a name in the source means, however torch was imported.

LibCST's QualifiedNameProvider answers this too, but costs about eight parses per file; the
linter needs a dozen names, so a table of the module's own import aliases is enough and
costs nothing beyond visiting the import statements.
"""

from __future__ import annotations

import re

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
_CANONICAL_MODULES = {"torch.cuda.streams": "torch.cuda"}
"""Submodules whose names torch.cuda re-exports: `torch.cuda.streams.Stream` is `torch.cuda.Stream`."""


class ImportTable:
    """Local name -> dotted name it was imported as, for the imports seen in one module.

    A name bound by two different imports is dropped: guessing would trade precision for recall.
    Relative imports are not resolved (the module's package is unknown to a pure function).
    """

    def __init__(self) -> None:
        self._aliases: dict[str, str] = {}
        self._ambiguous: set[str] = set()

    def add(self, node: cst.Import | cst.ImportFrom) -> None:
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
        """`tc.stream` -> `torch.cuda.stream` under `import torch.cuda as tc`; None if not imported."""
        dotted = dotted_name(expr)
        if dotted is None:
            return None
        root, _, rest = dotted.partition(".")
        target = self._aliases.get(root)
        if target is None:
            module, _, leaf = dotted.rpartition(".")
            return f"torch.cuda.{leaf}" if _DEVICE_HANDLE.search(module) else None
        full = f"{target}.{rest}" if rest else target
        module, _, leaf = full.rpartition(".")
        return f"{_CANONICAL_MODULES.get(module, module)}.{leaf}" if module else full


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
