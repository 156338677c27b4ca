"""Hooks: functions autograd or a module calls, whose arguments' producer the code shows.

A function registered with `t.register_hook(fn)`, `p.register_post_accumulate_grad_hook(fn)` or
a module's forward and backward hooks is called by autograd (or by the module's `__call__`)
with tensors written on the stream current at that call: the gradient, the parameter it was
accumulated into, the module's inputs and outputs; so does the `backward` of a custom
`torch.autograd.Function` (its gradients, after `ctx`). So their parameters are the caller's work
on its entry stream, as a test run would observe them (lint/run_facts.py), with no assumption:
`HookArguments` answers the analysis' question about them the way saved facts do.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import libcst as cst

from csan_lint.lint.analysis import api
from csan_lint.lint.analysis.api import Kind
from csan_lint.lint.analysis.uses import ModuleUses
from csan_lint.lint.names import ImportTable
from csan_lint.lint.recognize import PARTIAL
from csan_lint.lint.run_facts import ModuleFacts

_HOOK_KEYWORD = "hook"
_BACKWARD = "backward"


@dataclass(frozen=True)
class HookArguments(ModuleFacts):
    """A module's saved facts, and its hooks: a hook's parameter (or its `.grad`) comes written
    by its caller."""

    hooks: Mapping[str, tuple[frozenset[str], str]] = field(default_factory=dict)
    """Hook function (dotted as lint/scan.py names it) -> its parameters that its caller writes,
    and what calls it, in a finding's words."""

    def written_argument(self, qualname: str | None, name: str) -> str | None:
        found = super().written_argument(qualname, name)
        if found is not None or qualname is None or qualname not in self.hooks:
            return found
        params, caller = self.hooks[qualname]
        return caller if name.partition(".")[0] in params else None

    def kept_by_caller(self, qualname: str | None) -> frozenset[str]:
        """Autograd goes on with a hook's gradient (or frees it, for the replacement returned),
        a module with its hook's inputs and outputs: work pending on them at return races that."""
        hook = self.hooks.get(qualname) if qualname is not None else None
        return hook[0] if hook is not None else frozenset()


def with_hooks(
    observed: ModuleFacts,
    uses: ModuleUses,
    functions: Iterable[tuple[str, cst.FunctionDef]],
    imports: ImportTable,
    classes: Mapping[str, Sequence[str]],
) -> ModuleFacts:
    """`observed`, and what the module's hook registrations and autograd Functions say of the
    hooks' arguments (`classes`: the module's classes -> their bases' dotted names)."""
    defined = dict(functions)
    hooks: dict[str, tuple[frozenset[str], str]] = {}
    for owner, call in uses.registrations:
        if (registered := _registered(call, owner, defined.keys(), imports)) is not None:
            name, bound = registered
            caller = f"autograd or a module passes it to '{name.rpartition('.')[2]}', a hook"
            hooks[name] = (_parameters(defined[name], bound), caller)
    for owner, bases in classes.items():
        backward = defined.get(f"{owner}.{_BACKWARD}")
        if backward is not None and any(_is_autograd_function(base, imports) for base in bases):
            params = _parameters(backward, 1)  # after `ctx`
            hooks[f"{owner}.{_BACKWARD}"] = (params, f"autograd passes it to '{owner}.backward'")
    if not hooks:
        return observed
    return HookArguments(observed.functions, observed.stale, hooks)


def _registered(call: cst.Call, owner: str, defined: Iterable[str], imports: ImportTable) -> tuple[str, int] | None:
    """The module's function a registration names: `fn` (nested in `owner`, or in a scope
    around it), `self.fn`, or either wrapped in `functools.partial`; and how many leading
    parameters the partial binds (those the registering code passes, not autograd)."""
    hook = next((a.value for a in call.args if a.keyword is None or a.keyword.value == _HOOK_KEYWORD), None)
    bound = 0
    if isinstance(hook, cst.Call) and imports.qualified(hook.func) == PARTIAL and hook.args:
        bound = sum(1 for arg in hook.args[1:] if arg.keyword is None and not arg.star)
        hook = hook.args[0].value
    known = set(defined)
    if isinstance(hook, cst.Name):
        scopes = owner.split(".") if owner else []
        candidates = [".".join([*scopes[:depth], hook.value]) for depth in range(len(scopes), -1, -1)]
    elif isinstance(hook, cst.Attribute) and isinstance(hook.value, cst.Name) and hook.value.value in ("self", "cls"):
        scopes = owner.split(".")
        candidates = [".".join([*scopes[:depth], hook.attr.value]) for depth in range(len(scopes) - 1, 0, -1)]
    else:
        return None
    found = next((candidate for candidate in candidates if candidate in known), None)
    return None if found is None else (found, bound)


def _parameters(function: cst.FunctionDef, bound: int = 0) -> frozenset[str]:
    """The parameters its caller passes, less `self`/`cls` and the first `bound` positional ones."""
    positional = [p.name.value for p in (*function.params.posonly_params, *function.params.params)]
    positional = [name for name in positional if name not in ("self", "cls")][bound:]
    star = function.params.star_arg
    starred = [star.name.value] if isinstance(star, cst.Param) else []
    return frozenset([*positional, *(p.name.value for p in function.params.kwonly_params), *starred])


def _is_autograd_function(base: str, imports: ImportTable) -> bool:
    operation = api.operation(imports.qualified_name(base))
    return operation is not None and operation.kind is Kind.AUTOGRAD_FUNCTION
