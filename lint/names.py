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

from collections.abc import Callable, Iterator, Mapping

import libcst as cst

from csan_lint.lint.analysis import api
from csan_lint.lint.analysis.api import Kind, On
from csan_lint.lint.model import NO_SPELLINGS, Spellings
from csan_lint.lint.models import shipped_models
from csan_lint.lint.vocabulary import TENSOR_MODULES

STREAM_CONTEXTS = api.names(Kind.ENTER_STREAM)
"""Calls whose value, used in `with`, makes their stream argument current for the block."""
STREAM_CONSTRUCTORS = api.names(Kind.STREAM_CREATE)
CURRENT_STREAM = api.canonical_of(Kind.CURRENT_STREAM)
DEFAULT_STREAM = api.canonical_of(Kind.DEFAULT_STREAM)
STREAM_VALUES = api.names(Kind.STREAM_CREATE, Kind.CURRENT_STREAM, Kind.DEFAULT_STREAM)
"""Calls whose value is a stream."""
EVENT_CONSTRUCTORS = api.names(Kind.EVENT_CREATE)
_REFERABLE = STREAM_CONTEXTS | STREAM_VALUES | EVENT_CONSTRUCTORS
"""API a name may be bound to, to be called later: `self._stream_context = torch.cuda.stream`."""
DEVICE_SYNC = api.canonical_of(Kind.HOST_SYNC, On.DEVICE)
SET_STREAM = api.canonical_of(Kind.SET_STREAM)
GRAPH_CAPTURE = api.canonical_of(Kind.CAPTURE)
"""A `with` on it captures a CUDA graph on a side stream, after synchronizing the device."""

ACCELERATOR_FACTORIES = api.ACCELERATOR_FACTORIES
_DEVICE_MODULES = frozenset({"torch.cuda", "torch.xpu", "torch.npu", "torch.mtia"})
_CURRENT_STREAM_LEAF = CURRENT_STREAM.rpartition(".")[2]
"""A method of this name on an object the module did not import returns the current stream: the
projects' wrappers (Megatron's `context.current_stream()`) do, and naming one that way for any
other stream would mislead every reader."""
DEVICE_FACTS = {"resolves_data_dependency": False, "is_synchronized_device": False}
"""DeepSpeed accelerator queries a CUDA device answers: its streams do not order each other."""
_OTHER_DEVICE_TYPES = frozenset({"xpu", "npu", "hpu", "mps", "mtia", "mlu", "musa", "xla"})
"""Device types other than CUDA: a CUDA device's type is never one of them."""


def _meanings(spellings: Spellings) -> dict[str, str]:
    """Each project wrapper -> the canonical name of what its setting says it does (api.SETTINGS),
    and each of the project's models -> what it declares (lint/models.py)."""
    return {
        **dict(spellings.models),
        **{
            name: api.canonical_of(kind)
            for setting, kind in api.SETTINGS.items()
            for name in getattr(spellings, setting)
        },
    }


class ImportTable:
    """Local name -> dotted name it was imported as, for the imports seen in one module.

    A name bound by two different imports is dropped: guessing would trade precision for recall.
    Relative imports are not resolved (the module's package is unknown to a pure function).
    """

    def __init__(self, spellings: Spellings = NO_SPELLINGS, *, kinds_from_names: bool = True) -> None:
        self.kinds_from_names = kinds_from_names
        """Whether a name nothing binds says what it holds (`kinds-from-names`,
        lint/analysis/assumptions.py): a stream, an event, a device module, a device."""
        self.streams_by_name: set[str] = set()
        """Dotted names taken for a stream by their name alone (`names_a_stream`): a hazard on
        such a stream rests on `kinds-from-names`."""
        self._aliases: dict[str, str] = {}
        self._ambiguous: set[str] = set()
        project = _meanings(spellings)
        self._project: Mapping[str, str] = {**dict(shipped_models()), **project}
        """A shipped model (lint/models.py) is a library's callable, matched only as imported; the
        project's wrappers and models, also by their last names (`_project_suffixes`); a project's
        model replaces a shipped one."""
        self._handles: set[str] = set()
        """Dotted names bound to a device module or accelerator object (`accel = get_accelerator()`)."""
        self._streams: set[str] = set()
        """Dotted names bound to a stream somewhere in the module (`self.s1 = torch.Stream()`)."""
        self._stream_collections: set[str] = set()
        """Dotted names bound to a list or tuple of streams (`self.streams = [torch.cuda.Stream() for _ in r]`)."""
        self._references: dict[str, str | None] = {}
        """Dotted names bound to the API itself (`self._ctx = torch.cuda.stream`); None: to two parts of it."""
        self._properties: dict[str, str] = {}
        """`self.x` -> the stream call its property makes on each read (`current_stream`, `default_stream`)."""
        self._getters: dict[str, str] = {}
        """`get_stream`, `self.compute_stream` -> the stream call a function of the module that
        takes no argument makes and returns (`def get_stream(): return torch.cuda.current_stream()`)."""
        self._project_suffixes = _suffixes(project)

    def add(self, node: cst.Import | cst.ImportFrom | cst.Assign | cst.AnnAssign | cst.FunctionDef) -> None:
        """Learns the names an import binds, that an assignment (annotated or not) binds a device
        module or a stream, or that a property returns the current or the default stream."""
        if isinstance(node, cst.FunctionDef):
            meaning = self._returned_stream_call(node)
            method = bool(node.params.params) and node.params.params[0].name.value in ("self", "cls")
            if meaning is None or not _takes_nothing(node.params, method):
                return
            called = f"self.{node.name.value}" if method else node.name.value
            if any(_is_name(decorator.decorator, "property") for decorator in node.decorators):
                self._properties[called] = meaning
            elif not node.decorators:
                self._getters[called] = meaning
            return
        if isinstance(node, cst.AnnAssign):
            if node.value is not None:
                self.add(cst.Assign([cst.AssignTarget(node.target)], node.value))
            return
        if isinstance(node, cst.Assign):
            keys = [key for target in node.targets if (key := dotted_name(target.target)) is not None]
            if self._is_device_module(node.value):
                self._handles.update(keys)
            elif self._makes_stream(node.value):
                self._streams.update(keys)
            elif any(self._makes_stream(item) for item in _made_items(node.value)):
                self._stream_collections.update(keys)
            elif (meaning := self._reference(node.value)) is not None:
                for key in keys:
                    self._references[key] = meaning if self._references.get(key, meaning) == meaning else None
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

    def _is_device_module(self, expr: cst.BaseExpression) -> bool:
        """`get_accelerator()`, `torch.cuda`, `getattr(torch, device.type)`, or a choice of them."""
        if isinstance(expr, cst.IfExp):
            return self._is_device_module(expr.body) or self._is_device_module(expr.orelse)
        if not isinstance(expr, cst.Call):
            return self.qualified(expr) in _DEVICE_MODULES
        if self.qualified(expr.func) in ACCELERATOR_FACTORIES:
            return True
        return (
            isinstance(expr.func, cst.Name)
            and expr.func.value == "getattr"
            and len(expr.args) == 2
            and self.qualified(expr.args[0].value) == "torch"
            and any(self.names_a_device(name) for name in _identifiers(expr.args[1].value))
        )

    def _returned_stream_call(self, function: cst.FunctionDef) -> str | None:
        """`return torch.cuda.current_stream()` as the whole body: the stream call made anew on
        each call of the function (or read of the property; a `cached_property` keeps its first
        answer: not one)."""
        body = [
            statement
            for statement in function.body.body
            if not (isinstance(statement, cst.SimpleStatementLine) and _is_docstring(statement))
        ]
        if len(body) != 1 or not isinstance(body[0], cst.SimpleStatementLine) or len(body[0].body) != 1:
            return None
        returned = body[0].body[0]
        value = returned.value if isinstance(returned, cst.Return) else None
        meaning = self.qualified(value.func) if isinstance(value, cst.Call) else None
        return meaning if meaning in (CURRENT_STREAM, DEFAULT_STREAM) else None

    def stream_property(self, key: str) -> str | None:
        """The stream call reading `key` makes (`torch.cuda.current_stream`), if it is a property
        of the module's classes that returns one; None for any other name."""
        return self._properties.get(key)

    def stream_call(self, call: cst.Call) -> str | None:
        """The stream call a call makes: `torch.cuda.current_stream()` (any spelling) or a
        function of the module that returns one (`get_comp_stream()`); None for any other."""
        qualified = self.qualified(call.func)
        if qualified in (CURRENT_STREAM, DEFAULT_STREAM):
            return qualified
        key = dotted_name(call.func)
        return self._getters.get(key) if key is not None and not call.args else None

    def _reference(self, expr: cst.BaseExpression) -> str | None:
        """The stream API an expression names without calling it (`torch.cuda.stream`, or a
        choice of spellings of it: `get_device_module(d).stream if c else torch.cuda.stream`),
        or a tensor operator (`torch.maximum if inf else torch.add`: a choice of operators acts
        as any one of them on streams and on the host, so the first stands for all)."""
        if isinstance(expr, cst.IfExp):
            meanings = {meaning for meaning in (self._reference(expr.body), self._reference(expr.orelse)) if meaning}
            if len(meanings) > 1 and all(_operator(meaning) for meaning in meanings):
                return min(meanings)
            return meanings.pop() if len(meanings) == 1 else None
        if isinstance(expr, (cst.Name, cst.Attribute)):
            meaning = self.qualified(expr)
            return meaning if meaning is not None and (meaning in _REFERABLE or _operator(meaning)) else None
        return None

    # ---- what a name alone says, where nothing binds it (under `kinds-from-names`)

    def names_a_stream(self, dotted: str) -> bool:
        """A stream by its name alone (noted in `streams_by_name`)."""
        if self.kinds_from_names and api.names_a_stream(dotted):
            self.streams_by_name.add(dotted)
            return True
        return False

    def names_an_event_or_stream(self, dotted: str) -> bool:
        return self.kinds_from_names and api.names_an_event_or_stream(dotted)

    def names_a_device(self, dotted: str) -> bool:
        return self.kinds_from_names and api.names_a_device(dotted)

    def _names_a_device_module(self, dotted: str) -> bool:
        return self.kinds_from_names and api.names_a_device_module(dotted)

    def device_fact(self, test: cst.BaseExpression) -> bool | None:
        """The value of a test a CUDA device decides (`not get_accelerator().resolves_data_dependency()`,
        `self.device_type == "xpu"`, `is_npu() and device.type == "npu"`); None for any other test."""
        if isinstance(test, cst.BooleanOperation) and isinstance(test.operator, cst.And):
            parts = (self.device_fact(test.left), self.device_fact(test.right))
            return False if False in parts else None
        if isinstance(test, cst.Comparison):
            return _other_device_type(test, self.names_a_device)
        negated = isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not)
        call = test.expression if isinstance(test, cst.UnaryOperation) and negated else test
        if not (isinstance(call, cst.Call) and isinstance(call.func, cst.Attribute)):
            return None
        fact, receiver = DEVICE_FACTS.get(call.func.attr.value), call.func.value
        if isinstance(receiver, cst.Call):
            handle = self.qualified(receiver.func) in ACCELERATOR_FACTORIES
        else:
            handle = dotted_name(receiver) in self._handles
        return None if fact is None or not handle else fact != negated

    def binds_stream(self, key: str) -> bool:
        """Whether the module assigns a stream to this dotted name somewhere, or it is a stream property."""
        return key in self._streams or key in self._properties

    def makes_stream(self, key: str) -> bool:
        """Whether the module assigns a stream it creates to this dotted name somewhere."""
        return key in self._streams

    def binds_streams(self, key: str) -> bool:
        """Whether the module assigns a list or tuple of streams to this dotted name somewhere."""
        return key in self._stream_collections

    def _makes_stream(self, expr: cst.BaseExpression) -> bool:
        return isinstance(expr, cst.Call) and self.qualified(expr.func) in STREAM_VALUES

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
        return self.qualified_name(dotted)

    def qualified_name(self, dotted: str) -> str | None:
        """`qualified` of a dotted name as the module spells it (a class's base, `nn.Module`)."""
        if dotted in self._project:
            return self._project[dotted]
        if self._references.get(dotted) is not None:
            return self._references[dotted]
        root, _, rest = dotted.partition(".")
        target = self._aliases.get(root)
        if target is None and dotted in self._project_suffixes:
            return self._project_suffixes[dotted]  # a wrapper imported relatively, or called where defined
        if target is None:
            module, _, leaf = dotted.rpartition(".")
            if module in self._handles:
                return api.accelerator_member(leaf)
            if module and leaf == _CURRENT_STREAM_LEAF:
                return CURRENT_STREAM  # a project's own: `context.current_stream()`
            return f"torch.cuda.{leaf}" if self._names_a_device_module(module) else None
        full = f"{target}.{rest}" if rest else target
        if full in self._project:
            return self._project[full]
        module, _, leaf = full.rpartition(".")
        full = f"{api.SPELLING_MODULES.get(module, module)}.{leaf}" if module else full
        return api.SPELLING_NAMES.get(full, full)

    def _through_accelerator(self, expr: cst.BaseExpression) -> str | None:
        """`get_accelerator().stream` -> `torch.cuda.stream`, and a device module looked up by
        name, `getattr(torch, device).stream` (`torch.cuda` on a CUDA device); None for any other
        expression."""
        if isinstance(expr, cst.Attribute) and isinstance(expr.value, cst.Call):
            call = expr.value
            if self.qualified(call.func) in ACCELERATOR_FACTORIES:
                return api.accelerator_member(expr.attr.value)
            if isinstance(call.func, cst.Name) and call.func.value == "getattr" and len(call.args) == 2:
                module = dotted_name(call.args[0].value)
                if module is not None and self._aliases.get(module) == "torch":
                    full = f"torch.cuda.{expr.attr.value}"
                    return api.SPELLING_NAMES.get(full, full)
        return None


def _suffixes(meanings: Mapping[str, str]) -> dict[str, str]:
    """`on_stream`, `stream.on_stream` for `pkg.stream.on_stream`: the names a wrapper goes by
    where no import says what it is; a suffix two wrappers share with different meanings is dropped."""
    found: dict[str, str | None] = {}
    for name, meaning in meanings.items():
        parts = name.split(".")
        for start in range(1, len(parts)):
            suffix = ".".join(parts[start:])
            found[suffix] = meaning if found.get(suffix, meaning) == meaning else None
    return {suffix: meaning for suffix, meaning in found.items() if meaning is not None}


def _asname(alias: cst.ImportAlias) -> str:
    assert alias.asname is not None
    name = alias.asname.name
    return name.value if isinstance(name, cst.Name) else ""


def _takes_nothing(params: cst.Parameters, method: bool) -> bool:
    """A function called with no argument (a method: with its receiver only)."""
    return (
        len(params.params) == method
        and not params.posonly_params
        and not params.kwonly_params
        and not isinstance(params.star_arg, cst.Param)
        and params.star_kwarg is None
    )


def _is_name(expr: cst.BaseExpression, name: str) -> bool:
    return isinstance(expr, cst.Name) and expr.value == name


def _is_docstring(statement: cst.SimpleStatementLine) -> bool:
    first = statement.body[0]
    return isinstance(first, cst.Expr) and isinstance(first.value, (cst.SimpleString, cst.ConcatenatedString))


def dotted_name(expr: cst.BaseExpression) -> str | None:
    """`a.b.c` for a chain of names and attributes, None for anything else.

    Node types are compared with `is` (libcst's node classes are final): an `isinstance` that
    fails goes through the ABC machinery, ten times slower, and this is asked of most nodes."""
    parts: list[str] = []
    while type(expr) is cst.Attribute:
        parts.append(expr.attr.value)
        expr = expr.value
    if type(expr) is not cst.Name:
        return None
    parts.append(expr.value)
    return ".".join(reversed(parts))


def _operator(meaning: str) -> bool:
    """A tensor operator of torch's (`torch.add`, `torch.nn.functional.relu`)."""
    return meaning.rpartition(".")[0] in TENSOR_MODULES and meaning not in _REFERABLE


def _other_device_type(test: cst.Comparison, names_a_device: Callable[[str], bool]) -> bool | None:
    """`device.type == "xpu"` (False on CUDA), `!=` (True): a device type, spelled with
    "device", "accelerator" or `.type`, compared with another accelerator's name."""
    if len(test.comparisons) != 1:
        return None
    target = test.comparisons[0]
    operator, literal = target.operator, target.comparator
    if not (isinstance(literal, cst.SimpleString) and literal.evaluated_value in _OTHER_DEVICE_TYPES):
        return None
    name = dotted_name(test.left) or ""
    if not (names_a_device(name) or name.endswith(".type")):
        return None
    if isinstance(operator, cst.Equal):
        return False
    return True if isinstance(operator, cst.NotEqual) else None


def _identifiers(expr: cst.BaseExpression) -> Iterator[str]:
    """The names and attribute names an expression is built from (`device.type`, `get_device()`)."""
    if isinstance(expr, cst.Name):
        yield expr.value
    for child in expr.children:
        if isinstance(child, cst.BaseExpression):
            yield from _identifiers(child)


def _made_items(expr: cst.BaseExpression) -> Iterator[cst.BaseExpression]:
    """The items a list or tuple display, or a list comprehension, makes."""
    if isinstance(expr, (cst.List, cst.Tuple)):
        yield from (element.value for element in expr.elements)
    elif isinstance(expr, (cst.ListComp, cst.GeneratorExp)):
        yield expr.elt
