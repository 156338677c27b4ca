"""Stream-flow analysis of a module: which functions to interpret, how methods of a class
hand `self` attributes to each other; `analyse` makes the `ModuleFlow` the rules read
(lint/facts.py) with the stream hazards, and lint/analysis/driver.py adds the other facts.

The interpreter itself is lint/accesses.py, its ordering model lint/ordering.py.

Only functions (and module bodies) that contain a `with` statement, are entered on a side stream
by their callers (lint/scan.py, `entry_streams`), or call a function of the module that leaves a
tensor written on another stream, are interpreted: without any of these no second stream can
appear (except through `torch.cuda.set_stream`: a module that calls it has every function
interpreted). Across methods, `self.x` left written on a side stream by a method that may run
first is where public methods start from (see `_cross_method`).
Positions are computed only when a module has hazards (lint/positions.py), since even cheap ones cost a codegen.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence

import libcst as cst

from csan_lint.lint.accesses import FunctionAnalysis
from csan_lint.lint.analysis import api
from csan_lint.lint.analysis import assumptions as assumed
from csan_lint.lint.analysis.api import Kind
from csan_lint.lint.analysis.assumptions import DEFAULT_ASSUMPTIONS, Assumptions
from csan_lint.lint.analysis.tokens import CURRENT, root
from csan_lint.lint.analysis.uses import NO_USES, ModuleUses, module_uses
from csan_lint.lint.callers import Caller, CallersJoin, CallSite, at_every_call
from csan_lint.lint.dataswap import swapped_out
from csan_lint.lint.defaultjoin import waits_into_default
from csan_lint.lint.effects import Helpers
from csan_lint.lint.facts import ModuleFlow
from csan_lint.lint.hooks import with_hooks
from csan_lint.lint.model import NO_SPELLINGS, Spellings
from csan_lint.lint.names import CURRENT_STREAM, DEFAULT_STREAM, ImportTable, dotted_name
from csan_lint.lint.nodes import parse_module
from csan_lint.lint.ordering import FlowState, Hazard, Mark, TrackedTensor, join_states, join_tensor
from csan_lint.lint.run_facts import NO_MODULE_FACTS, ModuleFacts
from csan_lint.lint.scan import (
    Entry,
    body_of,
    calls_any,
    entry_streams,
    has_with,
    is_public,
    module_globals,
    resolve_relative,
    scan,
    self_calls,
    tensor_params,
)
from csan_lint.lint.summaries import PackageIndex


def analyse(
    module: cst.Module,
    path: str,
    *,
    package: PackageIndex | None = None,
    spellings: Spellings = NO_SPELLINGS,
    assumptions: Assumptions = DEFAULT_ASSUMPTIONS,
    observed: ModuleFacts = NO_MODULE_FACTS,
) -> ModuleFlow:
    """Interprets the module body and every function that has a `with` statement, then the
    public methods of classes whose methods leave `self` attributes written on a side stream.
    `package`: the other linted modules, for calls to functions imported from them;
    `spellings`: the project's own wrappers of the stream API; `assumptions`: what to assume
    where the code does not show a producer or a stream (lint/analysis/assumptions.py), unless
    `observed` (facts from test runs, lint/run_facts.py) settles it."""
    imports = ImportTable(spellings, kinds_from_names=assumptions.holds(assumed.KINDS_FROM_NAMES))
    functions: list[tuple[str, cst.FunctionDef]] = []
    classes: dict[str, list[str]] = {}
    relative: list[cst.ImportFrom] = []
    module_has_with = scan(module.body, imports, functions, "", classes, relative)
    hazards: dict[tuple[object, ...], Hazard] = {}
    reaches_torch = imports.imports_torch or package is not None  # or through another linted module
    uses = module_uses(module, imports, functions) if reaches_torch else NO_USES
    observed = with_hooks(observed, uses, functions, imports, classes)
    if reaches_torch:
        everywhere = uses.performs(Kind.SET_STREAM)
        helpers = Helpers(
            imports,
            dict(functions),
            module_globals(module, imports),
            package,
            resolve_relative(relative, path),
            classes,
            assumptions,
            observed,
            uses.waiting,
        )
        if module_has_with or everywhere:
            FunctionAnalysis(imports, hazards, function=None, helpers=helpers).run(module.body)
        exits: dict[str, FlowState] = {}
        swapped_in: dict[str, set[str]] = {}
        entered_on = (
            entry_streams(module.body, imports, uses.calls, helpers.functions, helpers.globals)
            if assumptions.holds(assumed.ENTRY_STREAM_FROM_CALLS)
            else {}
        )
        with_blocks = {name for name, function in functions if has_with(body_of(function.body))}
        recorders = uses.functions(api.RECORD_STREAM, nested=True)
        handle_launchers = uses.functions(api.LAUNCH_ON_HANDLE)
        writers = {  # called functions that access a tensor on another stream
            name
            for name, function in functions
            if name in with_blocks
            and uses.leaves[name.rpartition(".")[2]] > 0
            and has_with(body_of(function.body), imports, helpers.contexts)
            and (summary := helpers.summary(name)) is not None
            and any(effect.stream != CURRENT for effect in summary.effects)
        }
        writers |= {
            name
            for name in (imports.names | helpers.relative.keys()) - helpers.functions.keys()
            if uses.calls["", name] > 0
            and (summary := helpers.imported(name, imports.qualified(cst.Name(name)))) is not None
            and any(effect.stream != CURRENT for effect in summary.effects)
        }
        ambient = (
            {owner: ambient_streams(owner, functions, imports) for owner in classes}
            if assumptions.holds(assumed.KEPT_CURRENT_STREAM)
            else {}
        )
        kept_defaults: dict[str, set[str]] = {}
        default_waiters: set[str] = set()  # judged with no stream block of their own (lint/defaultjoin.py)
        if uses.performs(Kind.DEFAULT_STREAM) and assumptions.holds(assumed.DEFAULT_STREAM_JOIN):
            kept_defaults = {owner: kept_default_streams(owner, functions, imports) for owner in classes}
            default_waiters = {
                name for name, f in functions if waits_into_default(f, imports, _owner_ambient(name, kept_defaults))
            }
        stream_code = writers | with_blocks | entered_on.keys()  # its callers: what they order before calls
        interpreted = [
            (name, function)
            for name, function in functions
            if (
                everywhere
                or name in with_blocks
                or name in entered_on
                or name in recorders
                or name in handle_launchers
                or calls_any(name, function, stream_code)
                or name in default_waiters
                or helpers.calls_on_receivers(name, function, writers)
                or helpers.calls_imported_writers(name, function)
            )
        ]
        at_calls: dict[str, dict[cst.Call, CallSite]] = {}
        ordered_at_entry: dict[str, frozenset[str]] = {}
        calls = _module_calls(functions, entered_on, uses, classes)
        for name, function in _callers_first(interpreted, entered_on, calls, at_calls):
            analysis = FunctionAnalysis(
                imports, hazards, function=name, params=tensor_params(function), helpers=helpers
            )
            analysis.orders_at_calls = at_calls
            for attribute in _owner_ambient(name, ambient):
                analysis.live.streams[attribute] = CURRENT
            analysis.kept_defaults = frozenset(_owner_ambient(name, kept_defaults))
            entry = entered_on.get(name)
            written_on = entry.written_on if entry is not None else CURRENT
            site = at_every_call(list(at_calls.get(name, {}).values()), calls[name])
            if entry is not None and entry.written_on != CURRENT:  # the callers' writes are on the side stream
                site = site._replace(ordered=frozenset())
            ordered_at_entry[name] = site.ordered
            stream = entry.stream if entry is not None else CURRENT
            analysis.produced_by_caller(function, CallersJoin(name, functions), written_on, site, stream)
            if entry is not None:
                analysis.live.current = entry.stream  # every call of it is made on that stream
            analysis.run_function(function.body)
            if analysis.anypath.swapped_in:
                swapped_in[name] = analysis.anypath.swapped_in
            end = join_states(analysis.exits)
            if end is not None:
                exits[name] = end
        for owner in classes:
            _cross_method(owner, functions, exits, helpers, hazards, uses, ordered_at_entry)
            if swapped_in and assumptions.holds(assumed.DATA_SWAP):
                swapped_out(owner, functions, swapped_in, hazards)
    return ModuleFlow(
        path,
        module,
        list(hazards.values()),
        uses=uses,
        spellings=spellings,
        imports=imports,
        functions=functions,
        assumptions=assumptions,
        observed=observed,
    )


def _callers_first(
    interpreted: list[tuple[str, cst.FunctionDef]],
    entered_on: Mapping[str, Entry],
    calls: Mapping[str, int],
    at_calls: Mapping[str, Mapping[cst.Call, CallSite]],
) -> Iterator[tuple[str, cst.FunctionDef]]:
    """The functions to interpret, each once every call the module makes of it (`calls`) was
    interpreted where possible (`at_calls` fills as they run): what a caller ordered before
    its calls is then known at their entry. A cycle of calls, or a caller not interpreted,
    leaves the rest in source order; those entered on a side stream come after all others (their
    callers are in stream blocks, seldom entered themselves)."""
    for tier in (False, True):
        waiting = [item for item in interpreted if (item[0] in entered_on) == tier]
        while waiting:
            ready = next((item for item in waiting if len(at_calls.get(item[0], ())) >= calls[item[0]]), waiting[0])
            waiting.remove(ready)
            yield ready


def _module_calls(
    functions: Sequence[tuple[str, cst.FunctionDef]],
    entered_on: Mapping[str, Entry],
    uses: ModuleUses,
    classes: Mapping[str, object],
) -> dict[str, int]:
    """How many calls of each function the module makes: a method's by `self.m(...)`/`cls.m(...)`,
    a function's, also one nested in another, by its name (a leaf shared by two classes or two
    scopes counts both: never too few)."""
    counts = {}
    for name, _ in functions:
        owner, _, leaf = name.rpartition(".")
        method = owner in classes
        module_calls = uses.calls["self", leaf] + uses.calls["cls", leaf] if method else uses.calls["", leaf]
        counts[name] = entry.calls if (entry := entered_on.get(name)) is not None else module_calls
    return counts


def ambient_streams(owner: str, functions: Sequence[tuple[str, cst.FunctionDef]], imports: ImportTable) -> set[str]:
    """`self.s` bound in `__init__` to the current stream and never rebound: the stream the
    object's user runs on, taken as the current stream in its other methods (an offloader keeps
    `self.compute = current_stream()` to order its side stream after). A kept `default_stream()`
    stays its own stream, also where another branch of `__init__` keeps the current one (on
    another device): a caller running on a side stream is the bug it hides."""
    return _kept_streams(owner, functions, imports, lambda calls: calls == {CURRENT_STREAM})


def kept_default_streams(
    owner: str, functions: Sequence[tuple[str, cst.FunctionDef]], imports: ImportTable
) -> set[str]:
    """`self.s` bound in `__init__` to `default_stream()` (also where another device's branch
    binds the current stream) and never rebound: its waits are the default stream's
    (lint/defaultjoin.py)."""
    return _kept_streams(
        owner, functions, imports, lambda calls: DEFAULT_STREAM in calls and calls <= {CURRENT_STREAM, DEFAULT_STREAM}
    )


def _kept_streams(
    owner: str,
    functions: Sequence[tuple[str, cst.FunctionDef]],
    imports: ImportTable,
    accepted: Callable[[set[str | None]], bool],
) -> set[str]:
    """`self.x` whose bindings in `__init__` are calls `accepted` takes (their qualified names,
    None for any other value), rebound by no other method of `owner`."""
    methods = {name.rpartition(".")[2]: function for name, function in functions if name.rpartition(".")[0] == owner}
    init = methods.get("__init__")
    if init is None:
        return set()
    kept: dict[str, set[str | None]] = {}
    for target, value in _self_assignments(init):
        kept.setdefault(target, set()).add(imports.qualified(value.func) if isinstance(value, cst.Call) else None)
    chosen = {target for target, calls in kept.items() if accepted(calls)}
    if not chosen:
        return chosen  # the other methods need no visit
    for method, function in methods.items():
        if method != "__init__":
            chosen -= {target for target, _ in _self_assignments(function)}
    return chosen


def _owner_ambient(name: str, ambient: Mapping[str, set[str]]) -> set[str]:
    """The ambient streams of the class whose method `name` is, or is nested in (a hook defined
    in `__init__` sees the same `self`)."""
    parts = name.split(".")
    for end in range(len(parts) - 1, 0, -1):
        owner = ".".join(parts[:end])
        if owner in ambient:
            return ambient[owner]
    return set()


def _self_assignments(function: cst.FunctionDef) -> list[tuple[str, cst.BaseExpression]]:
    """(`self.x`, value) for every plain assignment to an attribute of `self` in `function`."""
    found: list[tuple[str, cst.BaseExpression]] = []

    class Assignments(cst.CSTVisitor):
        def visit_Assign(self, node: cst.Assign) -> None:
            for target in node.targets:
                key = dotted_name(target.target)
                if key is not None and key.startswith("self.") and key.count(".") == 1:
                    found.append((key, node.value))

    function.body.visit(Assignments())
    return found


def _cross_method(
    owner: str,
    functions: Sequence[tuple[str, cst.FunctionDef]],
    exits: Mapping[str, FlowState],
    helpers: Helpers,
    hazards: dict[tuple[object, ...], Hazard],
    uses: ModuleUses,
    ordered_at_entry: Mapping[str, frozenset[str]],
) -> None:
    """A producer method leaves `self.x` written (or read) on a side stream; a public method of
    the same class may run after it and use (or overwrite) `self.x`, so it starts from those
    accesses.

    The rule, for precision: a producer is a public method, or one called as `self.m()` from
    `__init__` or from a public method; a consumer is a public method other than `__init__`.
    Only accesses on streams every method names alike (`self.s`, module globals) and not
    ordered before the current stream when the producer returns are carried over.
    """
    methods = {
        name.removeprefix(f"{owner}."): function for name, function in functions if name.rpartition(".")[0] == owner
    }
    produced = {
        method: _side_accesses(end, helpers.globals) for method in methods if (end := exits.get(f"{owner}.{method}"))
    }
    produced = {method: writes for method, writes in produced.items() if writes}
    if not produced:
        return
    first = {method for method in methods if is_public(method)}
    if any(method not in first and uses.calls["self", method] > 0 for method in produced):
        for method in ("__init__", *first):
            if method in methods:
                first |= self_calls(methods[method].body)
    seed: dict[str, TrackedTensor] = {}
    for method in sorted(produced.keys() & first):
        for key, tensor in produced[method].items():
            seed[key] = join_tensor(seed[key], tensor) if key in seed else tensor
    if not seed:
        return
    public = {method for method in methods if is_public(method) and method != "__init__"}
    called = {callee for method in sorted(public) for callee in self_calls(methods[method].body)} - public
    in_flight = {key: tensor for key, tensor in seed.items() if key.endswith("]")}  # only a return hands them on
    for method, function in methods.items():
        entry = seed if method in public else in_flight if method in called else {}
        if entry:
            analysis = FunctionAnalysis(
                helpers.imports,
                hazards,
                function=f"{owner}.{method}",
                params=tensor_params(function),
                helpers=helpers,
                entry=entry,
            )
            name = f"{owner}.{method}"
            analysis.caller = Caller(join=CallersJoin(name, functions), ordered=ordered_at_entry.get(name, frozenset()))
            analysis.role = "from what the class's other methods leave written on a side stream"
            analysis.run_function(function.body)


def _side_accesses(end: FlowState, globals_: frozenset[str]) -> dict[str, TrackedTensor]:
    """`self.x` (and `self.x.y` of an object kept there) -> its last writes and reads on a side
    stream of `self` or of the module that are not yet ordered before the current stream; for the
    items of results in flight kept in a container (`self.outputs[][0]`, lint/bindings.py
    `kept.kept_items`), on any side stream: no other method waits on it by name, so only a sync or an
    event orders them. The public methods start from all of them, the methods they call as
    `self.m()` from the results in flight."""

    def pending(marks: frozenset[Mark], item: bool) -> frozenset[Mark]:
        return frozenset(
            mark
            for mark in marks
            if mark.access.stream != CURRENT
            and not mark.orders(CURRENT)
            and mark.access.produced != "moved"  # reported where the moving method returns
            and (item or mark.access.stream.startswith("self.") or root(mark.access.stream) in globals_)
        )

    found = {}
    for key, tensor in end.tensors.items():
        if key.startswith("self.") and key.count(".") <= 2:  # `self.loader.batch`: an object's, see receivers.py
            item = key.endswith("]")
            writes, reads = pending(tensor.writes, item), pending(tensor.reads, item)
            if writes or reads:
                # made from a stream of `self`'s pool: a method that uses it elsewhere and drops it frees it
                alloc = tensor.pool if tensor.pool is not None and tensor.pool.startswith("self.") else None
                found[key] = TrackedTensor(writes=writes, reads=reads, pool=tensor.pool, alloc=alloc)
    return found


def module_helpers(source: str) -> Helpers | None:
    """Summaries of another linted module's functions, for its importers; None if it cannot have any."""
    try:
        module = parse_module(source)
    except cst.ParserSyntaxError:
        return None
    imports = ImportTable()
    functions: list[tuple[str, cst.FunctionDef]] = []
    classes: dict[str, list[str]] = {}
    scan(module.body, imports, functions, "", classes, [])
    if not imports.imports_torch:
        return None
    return Helpers(imports, dict(functions), module_globals(module, imports), classes=classes)
