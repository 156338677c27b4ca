"""`[tool.csan-lint]` in pyproject.toml, merged with `--select`/`--ignore`, validated up front.

Every mistake is a `ConfigError` that names the file (or flag) and the key and guesses what was
meant, so that a typo never silently turns a rule off.
"""

from __future__ import annotations

import difflib
import os
import re
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import Any

import pathspec

from csan_lint.lint.files import display_path
from csan_lint.lint.model import NO_SPELLINGS, Spellings
from csan_lint.lint.registry import all_rules
from csan_lint.lint.rule import Rule

TABLE = "tool.csan-lint"
SPELLING_KEYS = {
    "stream-contexts": "stream_contexts",
    "current-stream": "current_stream",
    "stream-factories": "stream_factories",
    "event-factories": "event_factories",
}
"""The project's own wrappers of the stream API (lint/model.py `Spellings`), each a list of dotted callables."""
KEYS = ("select", "ignore", "exclude", "per-file-ignores", "respect-gitignore", "confirm", *SPELLING_KEYS)
"""`confirm` is the sub-table of `csan-lint --confirm`, passed through as a dict; it validates it."""
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
    """Selectors (code prefixes, codes, names) of the rules to run; None: all rules."""
    ignore: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    per_file_ignores: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    respect_gitignore: bool = True
    confirm: Mapping[str, Any] = field(default_factory=dict)
    spellings: Spellings = NO_SPELLINGS

    @cached_property
    def rules(self) -> tuple[type[Rule], ...]:
        """The rules on for every file, before `per-file-ignores`."""
        selected = set().union(*map(_codes_of, self.select)) if self.select is not None else None
        ignored = set().union(*map(_codes_of, self.ignore))
        return tuple(
            rule
            for rule in all_rules()
            if (selected is None or rule.code in selected) and rule.code not in ignored
        )

    @cached_property
    def _per_file(self) -> tuple[tuple[pathspec.GitIgnoreSpec, frozenset[str]], ...]:
        return tuple(
            (pathspec.GitIgnoreSpec.from_lines([pattern]), frozenset().union(*map(_codes_of, selectors)))
            for pattern, selectors in self.per_file_ignores.items()
        )

    def rules_for(self, path: Path) -> tuple[type[Rule], ...]:
        """The rules to run on `path` (absolute): `rules` less its `per-file-ignores`."""
        try:
            relative = path.relative_to(self.root).as_posix()
        except ValueError:
            relative = path.name
        ignored = {code for spec, codes in self._per_file if spec.match_file(relative) for code in codes}
        return tuple(rule for rule in self.rules if rule.code not in ignored) if ignored else self.rules


def _codes_of(selector: str) -> frozenset[str]:
    """Codes a selector means: a code prefix (`CSL1`), an exact code, or a rule name."""
    return frozenset(
        rule.code for rule in all_rules() if rule.code.startswith(selector) or rule.name == selector
    )


def _suggestion(word: str, choices: Sequence[str]) -> str:
    """A likely intended choice, else the list to pick from."""
    close = difflib.get_close_matches(word, choices, n=1, cutoff=0.7)
    return f"; did you mean `{close[0]}`?" if close else f" (expected one of: {', '.join(choices)})"


def check_selectors(selectors: Sequence[str], where: str) -> None:
    """Raise for a selector that matches no rule: it would silently do nothing."""
    for selector in selectors:
        if not _codes_of(selector):
            choices = [rule.code for rule in all_rules()] + [rule.name for rule in all_rules()]
            raise ConfigError(
                f"{where}: unknown rule code or name `{selector}`{_suggestion(selector, choices)}"
            )


def _string_list(value: object, where: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise ConfigError(f"{where}: expected a list of strings, got {value!r}")
    return tuple(value)


def _parse_table(table: Mapping[str, Any], where: str, root: Path, source: Path) -> Config:
    for key in table:
        if key not in KEYS:
            raise ConfigError(f"{where}: unknown key `{key}`{_suggestion(key, KEYS)}")
    select = _string_list(table["select"], f"{where}: select") if "select" in table else None
    ignore = _string_list(table.get("ignore", []), f"{where}: ignore")
    exclude = _string_list(table.get("exclude", []), f"{where}: exclude")
    check_selectors(select or (), f"{where}: select")
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
        **{attribute: _callables(table.get(key, []), f"{where}: {key}") for key, attribute in SPELLING_KEYS.items()}
    )
    return Config(
        root=root,
        source=source,
        select=select,
        ignore=ignore,
        exclude=exclude,
        per_file_ignores=per_file,
        respect_gitignore=respect_gitignore,
        confirm=confirm,
        spellings=spellings,
    )


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
    if not start.is_dir():
        start = start.parent
    for directory in (start, *start.parents):
        candidate = directory / "pyproject.toml"
        if candidate.is_file() and _table_of(_read_toml(candidate), candidate) is not None:
            return candidate
    return None


def load_config(
    paths: Sequence[str],
    config_file: str | None = None,
    select: Sequence[str] | None = None,
    ignore: Sequence[str] | None = None,
) -> Config:
    """The run's config: the file (`config_file`, else the one found from `paths`), then the
    command line on top: `select` replaces the file's selection, `ignore` adds to its ignores."""
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
        check_selectors(select, "--select")
        config = replace(config, select=tuple(select))
    if ignore:
        check_selectors(ignore, "--ignore")
        config = replace(config, ignore=(*config.ignore, *ignore))
    return config
