"""`python -m csan_lint` and the `csan-lint` command. `--version` is answered before click and
the linter are imported: pre-commit, editors and scripts ask it often, and it costs Python's
start-up only."""

import sys

from csan_lint import __version__


def main() -> None:
    if sys.argv[1:] == ["--version"]:
        print(f"csan-lint, version {__version__}")  # what click's version option prints
        return
    from csan_lint.lint.shell.cli import main as cli_main

    cli_main()


if __name__ == "__main__":
    main()
