"""How `--tests A B C` reads on the command line: which arguments after it name tests.

Users type several test paths after one `--tests`, as pytest takes them; click takes one value
per option. The arguments that follow and name tests are test paths too, the first that does
not is a path to lint.
"""

from __future__ import annotations

import os
import re
from pathlib import PurePath


class AmbiguousTestPath(Exception):
    """A file beside the last test path that does not name tests: either meaning is possible."""


_TEST_PART = re.compile(r"(tests?|testing|test_.*|.*_tests?(\.py)?)", re.IGNORECASE)
"""A path component that names tests: `tests/`, `test_x.py`, `x_test.py`, `unit_tests/`."""


def _names_tests(argument: str) -> bool:
    """A test node id (`f.py::test_x`), or a path with a component that names tests."""
    return "::" in argument or any(_TEST_PART.fullmatch(part) for part in PurePath(argument).parts)


def expand_tests(args: list[str]) -> list[str]:
    """`--tests A B C` as `--tests A --tests B --tests C`: the arguments after a `--tests` value
    that name tests (a node id, a path with a `test*`/`*_test` component) are test paths too; the
    first that does not ends them (a path to lint). A file next to the last test path that does
    not name tests is ambiguous: an error that says how to write either meaning."""
    expanded: list[str] = []
    index = 0
    while index < len(args):
        argument = args[index]
        expanded.append(argument)
        index += 1
        if argument == "--":
            return expanded + args[index:]
        if argument == "--tests" and index < len(args):
            last = args[index]
            expanded.append(last)
            index += 1
        elif argument.startswith("--tests="):
            last = argument.removeprefix("--tests=")
        else:
            continue
        while index < len(args) and not args[index].startswith("-"):
            following = args[index]
            if not _names_tests(following):
                if os.path.isfile(following) and PurePath(following).parent == PurePath(last.split("::")[0]).parent:
                    raise AmbiguousTestPath(
                        f"`{following}` follows --tests {last} but does not look like a test path: write "
                        f"`--tests {last} --tests {following}` to run both, or put the paths to lint before --tests"
                    )
                break
            expanded += ["--tests", following]
            last = following
            index += 1
    return expanded
