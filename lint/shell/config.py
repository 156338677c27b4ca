"""`[tool.csan-lint]` in pyproject.toml, merged with `--select`/`--ignore`, validated up front.

Every mistake is a `ConfigError` that names the file (or flag) and the key and guesses what was
meant, so that a typo never silently turns a rule off.
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import Any

import pathspec

from csan_lint.lint.analysis import api
from csan_lint.lint.analysis.assumptions import BY_NAME, DEFAULT_ASSUMPTIONS, Assumptions
from csan_lint.lint.model import NO_SPELLINGS, Spellings
from csan_lint.lint.models import ModelsError, models_file, parse_models
from csan_lint.lint.registry import all_rules
from csan_lint.lint.rule import Rule
from csan_lint.lint.run_facts import NO_MODULE_FACTS, FactsFileError, ModuleFacts, ObservedFacts, load_facts
from csan_lint.lint.shell.files import display_path
from csan_lint.lint.shell.suppress import UNUSED_NOQA_CODE, UNUSED_NOQA_NAME
from csan_lint.runtime.kinds import RUNTIME_CODES, runtime_codes_of

TABLE = "tool.csan-lint"
SPELLING_KEYS = {setting.replace("_", "-"): setting for setting in api.SETTINGS}
"""The project's own wrappers of the stream API (lint/model.py `Spellings`), each a list of dotted callables."""
KEYS = (
    "select", "extend-select", "ignore", "exclude", "per-file-ignores", "respect-gitignore", "confirm",
    "assumptions", "facts", "models", "model", *SPELLING_KEYS,
)  # fmt: skip
"""`confirm` is the sub-table of `csan-lint --confirm`: checked at load by the code that reads it;
`assumptions` a table of the analysis' assumptions switched on or off (docs/analysis.md); `facts`
a file of facts from test runs (lint/run_facts.py), relative to the config file; `models` a file
of models of code the linter cannot read and `model` an array of them (lint/models.py)."""
ALL = "ALL"
"""The selector of every code, the opt-in `unused-noqa` included (as in ruff)."""
_DOTTED = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*")


class ConfigError(Exception):
    """A configuration mistake; the message says where and, when it can, what was meant."""


@dataclass(frozen=True)
class Config:
    """The settings of one run. Patterns (`exclude`, `per-file-ignores`) are relative to `root`,
    the directory of the config file (or the working directory when there is none)."""

    root: Path
    source: Path | None = None
    select: tuple[str, ...] | None = None
    """Selectors (code prefixes, codes, names, `ALL`) of the rules to run; None: all rules."""
    extend_select: tuple[str, ...] = ()
    """Added to `select` (or to the default, every rule): how to turn on `unused-noqa`."""
    ignore: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    per_file_ignores: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    respect_gitignore: bool = True
    confirm: Mapping[str, Any] = field(default_factory=dict)
    spellings: Spellings = NO_SPELLINGS
    assumptions: Assumptions = DEFAULT_ASSUMPTIONS
    facts: ObservedFacts | None = None
    """Facts from test runs that settle assumptions (`facts`, `--facts`; lint/run_facts.py)."""

    def observed(self, shown: str, source: str) -> ModuleFacts:
        """What the facts file says of the module at `shown` that still matches `source`."""
        return self.facts.for_module(shown, source) if self.facts is not None else NO_MODULE_FACTS

    @cached_property
    def _selected(self) -> frozenset[str]:
        """Every code turned on (rules, runtime codes and `unused-noqa`), before `per-file-ignores`."""
        default = {rule.code for rule in all_rules()} | RUNTIME_CODE_SET if self.select is None else set()
        chosen = default.union(*map(_codes_of, (*(self.select or ()), *self.extend_select)))
        return frozenset(chosen - set().union(*map(_codes_of, self.ignore)))

    @cached_property
    def rules(self) -> tuple[type[Rule], ...]:
        """The rules on for every file, before `per-file-ignores`."""
        return tuple(rule for rule in all_rules() if rule.code in self._selected)

    def reports_unused_noqa(self, path: Path) -> bool:
        """Whether `unused-noqa` is on for `path`: only when selected by name (off by default)."""
        if self.select is None and not self.extend_select:
            return False  # the default: answered without importing the rules (libcst)
        return UNUSED_NOQA_CODE in self._selected and UNUSED_NOQA_CODE not in self._ignored_at(path)

    def _ignored_at(self, path: Path) -> set[str]:
        try:
            relative = path.relative_to(self.root).as_posix()
        except ValueError:
            relative = path.name
        return {code for spec, codes in self._per_file if spec.match_file(relative) for code in codes}

    @cached_property
    def _per_file(self) -> tuple[tuple[pathspec.GitIgnoreSpec, frozenset[str]], ...]:
        return tuple(
            (pathspec.GitIgnoreSpec.from_lines([pattern]), frozenset().union(*map(_codes_of, selectors)))
            for pattern, selectors in self.per_file_ignores.items()
        )

    def reports(self, code: str, path: Path) -> bool:
        """Whether a race's runtime code (CSL9xx) is on for `path` (absolute): selected, not
        ignored, not in its `per-file-ignores`. A code that is no runtime code (a kind newer than
        this version) is always on."""
        if code not in RUNTIME_CODE_SET:
            return True
        return code in self._selected and code not in self._ignored_at(path)

    def rules_for(self, path: Path) -> tuple[type[Rule], ...]:
        """The rules to run on `path` (absolute): `rules` less its `per-file-ignores`."""
        ignored = self._ignored_at(path)
        return tuple(rule for rule in self.rules if rule.code not in ignored) if ignored else self.rules


RUNTIME_CODE_SET = frozenset(entry.code for entry in RUNTIME_CODES)


def _codes_of(selector: str) -> frozenset[str]:
    """Codes a selector means: `ALL`, a code prefix (`CSL1`), an exact code, or a rule's or a
    runtime code's name."""
    named = [(rule.code, rule.name) for rule in all_rules()] + [(UNUSED_NOQA_CODE, UNUSED_NOQA_NAME)]
    found = {code for code, name in named if selector == ALL or code.startswith(selector) or name == selector}
    return frozenset(found | runtime_codes_of(selector))


def _suggestion(word: str, choices: Sequence[str]) -> str:
    """A likely intended choice, else the list to pick from."""
    import difflib  # only for a mistyped setting: not on every run's start-up

    close = difflib.get_close_matches(word, choices, n=1, cutoff=0.7)
    return f"; did you mean `{close[0]}`?" if close else f" (expected one of: {', '.join(choices)})"


def check_selectors(selectors: Sequence[str], where: str) -> None:
    """Raise for a selector that matches no rule: it would silently do nothing."""
    for selector in selectors:
        if not _codes_of(selector):
            choices = [rule.code for rule in all_rules()] + [rule.name for rule in all_rules()]
            choices += [entry.code for entry in RUNTIME_CODES] + [entry.name for entry in RUNTIME_CODES]
            choices += [UNUSED_NOQA_CODE, UNUSED_NOQA_NAME, ALL]
            raise ConfigError(f"{where}: unknown rule code or name `{selector}`{_suggestion(selector, choices)}")


def _string_list(value: object, where: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise ConfigError(f"{where}: expected a list of strings, got {value!r}")
    return tuple(value)


def _parse_table(table: Mapping[str, Any], where: str, root: Path, source: Path) -> Config:
    for key in table:
        if key not in KEYS:
            raise ConfigError(f"{where}: unknown key `{key}`{_suggestion(key, KEYS)}")
    select = _string_list(table["select"], f"{where}: select") if "select" in table else None
    extend_select = _string_list(table.get("extend-select", []), f"{where}: extend-select")
    ignore = _string_list(table.get("ignore", []), f"{where}: ignore")
    exclude = _string_list(table.get("exclude", []), f"{where}: exclude")
    if select is not None:
        check_select(select, f"{where}: select")
    check_selectors(extend_select, f"{where}: extend-select")
    check_selectors(ignore, f"{where}: ignore")
    per_file_table = table.get("per-file-ignores", {})
    if not isinstance(per_file_table, dict):
        raise ConfigError(f"{where}: per-file-ignores: expected a table of pattern = [codes]")
    per_file: dict[str, tuple[str, ...]] = {}
    for pattern, selectors in per_file_table.items():
        key_where = f"{where}: per-file-ignores: {pattern!r}"
        per_file[pattern] = _string_list(selectors, key_where)
        check_selectors(per_file[pattern], key_where)
    respect_gitignore = table.get("respect-gitignore", True)
    if not isinstance(respect_gitignore, bool):
        raise ConfigError(f"{where}: respect-gitignore: expected true or false, got {respect_gitignore!r}")
    confirm = table.get("confirm", {})
    if not isinstance(confirm, dict):
        raise ConfigError(f"{where}: confirm: expected a table ([{TABLE}.confirm])")
    spellings = Spellings(
        **{attribute: _callables(table.get(key, []), f"{where}: {key}") for key, attribute in SPELLING_KEYS.items()},
        models=_models(table, where, root),
    )
    assumptions = _assumptions(table.get("assumptions", {}), f"{where}: assumptions")
    facts = table.get("facts")
    if facts is not None and not isinstance(facts, str):
        raise ConfigError(f"{where}: facts: expected the path of a facts file, got {facts!r}")
    config = Config(
        root=root,
        source=source,
        select=select,
        extend_select=extend_select,
        ignore=ignore,
        exclude=exclude,
        per_file_ignores=per_file,
        respect_gitignore=respect_gitignore,
        confirm=confirm,
        spellings=spellings,
        assumptions=assumptions,
        facts=_facts(str(root / facts)) if facts else None,
    )
    if confirm:
        _check_confirm_table(config)
    return config


def check_select(selectors: Sequence[str], where: str) -> None:
    """`select` must name something: an empty one would run no rule and pass every file."""
    if not selectors:
        raise ConfigError(f"{where}: selects no rule (leave it out to run every rule, or use `{ALL}`)")
    check_selectors(selectors, where)


def _check_confirm_table(config: Config) -> None:
    """`[tool.csan-lint.confirm]` checked now, by the code that reads it, so that a typo fails
    every run, not only the first `--confirm`. That code is torch-free; only a project with the
    table pays for importing it."""
    from csan_lint.runtime.confirm import ConfirmUsageError, resolve_settings

    try:
        resolve_settings(config, {})
    except ConfirmUsageError as error:
        raise ConfigError(str(error)) from None


def _models(table: Mapping[str, Any], where: str, root: Path) -> tuple[tuple[str, str], ...]:
    """The models of `[[tool.csan-lint.model]]`, then those of the `models` file (relative to the
    config file's directory)."""
    path = table.get("models")
    if path is not None and not isinstance(path, str):
        raise ConfigError(f"{where}: models: expected the path of a models file, got {path!r}")
    try:
        inline = parse_models(table.get("model", []), f"{where}: model")
        return inline + (models_file(str(root / path), display_path(root / path)) if path else ())
    except ModelsError as error:
        raise ConfigError(str(error)) from None


def _assumptions(value: object, where: str) -> Assumptions:
    """`{name = true/false}`, each name one of the analysis' assumptions."""
    if not isinstance(value, dict):
        raise ConfigError(f"{where}: expected a table of assumption = true/false")
    for name, switch in value.items():
        _check_assumption(name, where)
        if not isinstance(switch, bool):
            raise ConfigError(f"{where}: {name}: expected true or false, got {switch!r}")
    return Assumptions.from_switches(value.items())


def _check_assumption(name: str, where: str) -> None:
    if name not in BY_NAME:
        raise ConfigError(f"{where}: unknown assumption `{name}`{_suggestion(name, sorted(BY_NAME))}")


def parse_switches(switches: Sequence[str], where: str = "--assume") -> list[tuple[str, bool]]:
    """`NAME=on` / `NAME=off` (also true/false) from the command line."""
    parsed = []
    for switch in switches:
        name, equals, value = switch.partition("=")
        _check_assumption(name.strip(), where)
        if not equals or value.strip().lower() not in _SWITCH_VALUES:
            raise ConfigError(f"{where}: `{switch}`: expected NAME=on or NAME=off")
        parsed.append((name.strip(), _SWITCH_VALUES[value.strip().lower()]))
    return parsed


_SWITCH_VALUES = {"on": True, "true": True, "off": False, "false": False}


def _callables(value: object, where: str) -> tuple[str, ...]:
    """Dotted names of callables (`pkg.cuda_utils.on_stream`, `self.on_stream`), not calls."""
    names = _string_list(value, where)
    for name in names:
        if not _DOTTED.fullmatch(name):
            stripped = name.strip().removesuffix("()")
            hint = f"; did you mean `{stripped}`?" if _DOTTED.fullmatch(stripped) else ""
            raise ConfigError(f"{where}: `{name}` is not a dotted name like `pkg.module.function`{hint}")
    return names


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as stream:
            return tomllib.load(stream)
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(f"{display_path(path)}: invalid TOML: {error}") from None
    except OSError as error:
        raise ConfigError(f"{display_path(path)}: cannot read: {error.strerror}") from None


def _table_of(document: dict[str, Any], path: Path) -> dict[str, Any] | None:
    """`[tool.csan-lint]` of a pyproject.toml; the whole document of any other TOML file."""
    if path.name != "pyproject.toml":
        return document
    table = document.get("tool", {}).get("csan-lint")
    if table is not None and not isinstance(table, dict):
        raise ConfigError(f"{display_path(path)}: [{TABLE}] must be a table")
    return table


def find_config_file(paths: Sequence[str]) -> Path | None:
    """The nearest pyproject.toml with a `[tool.csan-lint]` table, walking up from the common
    directory of the linted paths (the working directory when none are given)."""
    absolute = [os.path.abspath(path) for path in paths] or [os.getcwd()]
    start = Path(os.path.commonpath(absolute))
    if not os.path.isdir(start):
        start = start.parent
    for directory in (start, *start.parents):
        candidate = directory / "pyproject.toml"
        # os.path.isfile: a directory the user cannot search is "no config here", not an error.
        if os.path.isfile(candidate) and _table_of(_read_toml(candidate), candidate) is not None:
            return candidate
    return None


def load_config(
    paths: Sequence[str],
    config_file: str | None = None,
    select: Sequence[str] | None = None,
    ignore: Sequence[str] | None = None,
    extend_select: Sequence[str] = (),
    assume: Sequence[str] = (),
    facts: str | None = None,
) -> Config:
    """The run's config: the file (`config_file`, else the one found from `paths`), then the
    command line on top: `select` replaces the file's selection, `ignore` and `extend_select`
    add to theirs, and `assume` (`NAME=on|off`) switches assumptions on top of the file's."""
    source = Path(os.path.abspath(config_file)) if config_file is not None else find_config_file(paths)
    if source is None:
        config = Config(root=Path.cwd())
    else:
        if not source.is_file():
            raise ConfigError(f"{display_path(source)}: config file not found")
        table = _table_of(_read_toml(source), source) or {}
        where = display_path(source) + (f" [{TABLE}]" if source.name == "pyproject.toml" else "")
        config = _parse_table(table, where, source.parent, source)
    if select is not None:
        check_select(select, "--select")
        config = replace(config, select=tuple(select))
    if extend_select:
        check_selectors(extend_select, "--extend-select")
        config = replace(config, extend_select=(*config.extend_select, *extend_select))
    if ignore:
        check_selectors(ignore, "--ignore")
        config = replace(config, ignore=(*config.ignore, *ignore))
    if assume:
        config = replace(config, assumptions=config.assumptions.switched(parse_switches(assume)))
    if facts is not None:
        config = replace(config, facts=_facts(facts))
    return config


def _facts(path: str) -> ObservedFacts:
    try:
        return load_facts(path)
    except FactsFileError as error:
        raise ConfigError(str(error)) from None
