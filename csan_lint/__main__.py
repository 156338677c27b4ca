"""`python -m csan_lint` is the `csan-lint` command."""

from csan_lint.lint.cli import main

if __name__ == "__main__":
    main()
