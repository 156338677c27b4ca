"""Function summaries: what calling a function does to stream order and to the tensors it is
given, in the function's own names, so that call sites can replay it with their arguments.

Summaries are plain strings and sets, and the package index holds only source text (or, for a
project's module the run did not read, its path and content hash), so that the runner can build
the index without importing libcst and hand it to worker processes cheaply; the modules it
names are read, parsed and summarised in the worker, on first use, unless the summary store
already holds the summary asked for (lint/shell/summary_store.py).
"""

from __future__ import annotations

import ast
import hashlib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from csan_lint.lint.analysis import api
from csan_lint.lint.analysis.api import Kind, On, Receiver
from csan_lint.lint.diagnostics import decode_source

if TYPE_CHECKING:
    from csan_lint.lint.effects import Helpers
    from csan_lint.lint.shell.summary_store import SummaryStore

RETURNED = "<return>"
"""The key of a summary's `returned` effect for the whole value; `<return>[i]`: item i of a
returned tuple."""
ANY_OTHER = "<other>"
"""Ordering token standing for every stream the function does not name: a device sync orders it."""


def returned_key(position: int | None) -> str:
    """The key of a returned effect: the whole value (None), or item `position` of a tuple."""
    return RETURNED if position is None else f"{RETURNED}[{position}]"


def returned_position(key: str) -> int | None:
    """The inverse of `returned_key`."""
    return None if key == RETURNED else int(key.removeprefix(f"{RETURNED}[").removesuffix("]"))


@dataclass(frozen=True)
class Effect:
    """The function leaves `key` (a parameter or `self.x`) last written, or read since its last
    write, on `stream`."""

    key: str
    stream: str
    write: bool
    after: frozenset[str]
    """Tokens ordered after that access when the function returns, on every path."""
    rebound: bool = False
    """A write that binds `self.x` to a tensor of the function's own (on some path): the caller's
    tensor is dropped, not overwritten, so its accesses race with nothing the function did."""


@dataclass(frozen=True)
class Summary:
    """The effects of a call on every path that returns, in the function's own names.

    Tokens are streams (`<current>` for the caller's current stream, a parameter, `self.x`, a
    module global), `event:<name>` and `*` (a host sync); locals of the function never appear.
    """

    params: tuple[str, ...]
    """Positional parameters, without `self`/`cls`."""
    names: frozenset[str]
    """Every parameter name a call may pass by keyword."""
    orders: tuple[tuple[str, frozenset[str]], ...]
    """(token, tokens): an access ordered before `token` at the call is, on return, ordered
    before all of `tokens`; a token missing from its own set was re-recorded (an event)."""
    effects: tuple[Effect, ...]
    returned: tuple[Effect, ...] = ()
    """The value returned, where it is written on a stream other than the caller's and not yet
    ordered before it (keys: `returned_key`): the caller's names for it start from that write."""
    allocates: tuple[frozenset[str], ...] = ()
    """Per `return` of memory the function allocates on the stream current at the call, the
    parameters found `None` on its path (`if out is None: return x.to(dev)`): a call that passes
    a tensor for one of them gets that tensor back, not new memory of that stream's pool."""
    captures: tuple[tuple[str, frozenset[str], frozenset[str]], ...] = ()
    """(graph, inputs, outputs): a CUDA graph on `self` the function captures, and the tensors
    of `self` the capture reads and writes: what a replay of it in any method of the class
    reads and writes."""


_MAY_ORDER = re.compile(
    "|".join(
        rf"\.{method.name}\(" if method.shared else method.name
        for method in api.METHODS
        if method.receiver in (Receiver.STREAM, Receiver.EVENT, Receiver.STREAM_OR_EVENT)
        and method.op.kind in (Kind.WAIT, Kind.RECORD, Kind.HOST_SYNC)
    )
    + "|"
    + api.canonical_of(Kind.HOST_SYNC, On.DEVICE).rpartition(".")[2]
    + "".join(rf"|{name.rpartition('.')[2]}\(" for name in sorted(api.names(Kind.ENTER_STREAM)))
)
"""Text a module needs for any of its functions to have a summary worth replaying elsewhere: an
ordering method of a stream or an event (one other objects share, called), a device sync, or a
stream context called by its last name, as every spelling of it ends (`torch.cuda.stream(s)`,
`get_accelerator().stream(s)`, `StreamContext(s)`)."""


_unpickled: dict[str, PackageIndex] = {}
"""The index last received by this process (a pool worker), by content."""


def may_order(source: str) -> bool:
    """Whether a module's text mentions an ordering API: only such a module enters the index."""
    return _MAY_ORDER.search(source) is not None


def module_name(path: str) -> str:
    """`pkg/sub/helpers.py` -> `pkg.sub.helpers`; a package's `__init__.py` is the package."""
    parts = [part for part in re.split(r"[\\/]", path.removesuffix(".py")) if part not in ("", ".")]
    if parts and parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


@dataclass(frozen=True)
class IndexedFile:
    """A module of the project the run did not read: its text is read on first use, and taken
    only while it still has the content hash the index was built with."""

    path: str
    digest: str


class PackageIndex:
    """The linted modules (and, with a project index, the project's other modules: `files`) whose
    functions and classes' methods other linted modules may import.

    Modules are keyed by the dotted name their path spells; an import names a module by a
    suffix of that (the linted root's own parents are not part of the import), and a suffix
    that fits two modules is left unresolved. `consulted` records each import a lookup resolved
    (or failed to), so that the runner can cache a file's findings against exactly the modules
    they depend on; `store` keeps the summaries worked out, by module content (lint/shell/summary_store.py).
    """

    def __init__(
        self,
        sources: Mapping[str, str],
        files: Mapping[str, IndexedFile] | None = None,
        store: SummaryStore | None = None,
    ) -> None:
        self.sources = dict(sources)
        self.files = {name: file for name, file in (files or {}).items() if name not in self.sources}
        self.store = store
        self.consulted: set[tuple[str, str | None]] = set()
        """(dotted name a lookup asked for, the module it resolved to or None) since last cleared."""
        self._resolved: dict[str, str | None] = {}
        self._modules: dict[str, Helpers | None] = {}
        self._texts: dict[str, str | None] = {}
        self._defined: dict[str, frozenset[str]] = {}
        self._digests: dict[str, str] = {}

    @classmethod
    def build(cls, files: Iterable[tuple[str, str]]) -> PackageIndex:
        """From (path, source) pairs; keeps only modules that mention an ordering API."""
        return cls({module_name(path): source for path, source in files if may_order(source)})

    def __getstate__(self) -> dict[str, Any]:
        # Parsed modules stay in the process that parsed them; the key lets a worker that gets
        # the same index with every chunk of a run keep what it parsed for the earlier ones.
        digest = hashlib.blake2b(digest_size=16)
        for name in sorted(self.sources):
            digest.update(name.encode())
            digest.update(self.sources[name].encode(errors="surrogatepass"))
        for name in sorted(self.files):
            digest.update(f"\0{name}\0{self.files[name].path}\0{self.files[name].digest}".encode())
        return {"sources": self.sources, "files": self.files, "store": self.store, "key": digest.hexdigest()}

    def __setstate__(self, state: dict[str, Any]) -> None:
        known = _unpickled.get(state["key"])
        if known is not None:
            self.__dict__ = known.__dict__  # the same index: share its parsed modules
            return
        self.__init__(state["sources"], state["files"], state["store"])  # type: ignore[misc]
        _unpickled.clear()  # a process serves one run at a time: keep the latest index only
        _unpickled[state["key"]] = self

    def names(self) -> Iterable[str]:
        return (*self.sources, *self.files)

    def summary(self, qualified: str, on_current: frozenset[str] = frozenset()) -> Summary | None:
        """The summary of `pkg.module.function`, None when unknown or not worth replaying
        (`on_current`: as in `Helpers.summary`)."""
        module, _, name = qualified.rpartition(".")
        key = self._module(module) if module else None
        if key is None and "." in module:  # `pkg.comm.Comm.send`: a method of a class of `pkg.comm`
            module, _, owner = module.rpartition(".")
            key, name = self._module(module), f"{owner}.{name}"
        if key is None:
            return None
        if key not in self._modules:
            if not self._defines(key, name.rpartition(".")[2]):
                return None  # a class or a value the module defines, not a function: nothing to parse
            stored = self.store.lookup(self._digests[key], name, on_current) if self.store is not None else None
            if stored is not None:
                return stored[0]
            from csan_lint.lint.streamflow import module_helpers  # libcst only where summaries are built

            self._modules[key] = module_helpers(self._texts[key] or "")
        helpers = self._modules[key]
        found = None if helpers is None else helpers.exported(name, on_current)
        if self.store is not None:
            self.store.remember(self._digests[key], name, on_current, found)
        return found

    def update(self, name: str, source: str | None) -> None:
        """Module `name` now holds `source` (None: it left the index): the language server's
        edit of one module, without rebuilding the rest."""
        self.files.pop(name, None)
        self.sources.pop(name, None)
        if source is not None and may_order(source):
            self.sources[name] = source
        self._modules.pop(name, None)
        self._texts.pop(name, None)
        self._defined.pop(name, None)
        self._resolved.clear()

    def _defines(self, key: str, function: str) -> bool:
        """Whether the module defines a function or method named `function`: the names are read
        once per module with `ast` (a module of helpers is looked up by every call into it),
        far cheaper than the libcst parse a summary needs."""
        if key not in self._defined:
            self._defined[key] = _function_names(self._source(key))
        return function in self._defined[key]

    def _source(self, key: str) -> str | None:
        """The module's text (read once), its hash noted for the summary store."""
        if key not in self._texts:
            source = self.sources.get(key)
            if source is None:
                source = _read_indexed(self.files[key])
            self._texts[key] = source
            if source is not None:
                self._digests[key] = text_hash(source)
        return self._texts[key]

    def _module(self, dotted: str) -> str | None:
        if dotted not in self._resolved:
            self._resolved[dotted] = resolve(dotted, self.names())
        self.consulted.add((dotted, self._resolved[dotted]))
        return self._resolved[dotted]


def _function_names(source: str | None) -> frozenset[str]:
    """The names of every function and method a module defines (none if it does not parse)."""
    try:
        tree = ast.parse(source or "")
    except (SyntaxError, ValueError):
        return frozenset()
    return frozenset(node.name for node in ast.walk(tree) if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)))


def text_hash(source: str) -> str:
    """The key of a module's text in the summary store: the same for a file read here and the
    run's own copy of it, whatever its encoding on disk."""
    return hashlib.blake2b(source.encode(errors="surrogatepass"), digest_size=16).hexdigest()


def _read_indexed(file: IndexedFile) -> str | None:
    """The text of a module the run did not read; None if it is gone, undecodable, or changed
    since it was indexed (the next run indexes it again)."""
    try:
        with open(file.path, "rb") as handle:
            data = handle.read()
    except OSError:
        return None
    if hashlib.blake2b(data, digest_size=16).hexdigest() != file.digest:
        return None
    source = decode_source(data, file.path)
    return source if isinstance(source, str) else None


def resolve(dotted: str, names: Iterable[str]) -> str | None:
    """The one module of `names` that `dotted` names (itself, or a suffix of it), else None."""
    found = [name for name in names if name == dotted or name.endswith(f".{dotted}")]
    return found[0] if len(found) == 1 else None
