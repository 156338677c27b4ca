"""Golden CLI cases: tests/cli/cases/<case>/ holds `cmd` (the arguments, shell-quoted), `tree/`
(the files the command runs in; a path part `dot-x` becomes `.x`, so that fixture `.gitignore`
files do not act on this repository), optionally `stdin` (what the command reads from stdin) and
`expected` (exit code, stdout, stderr; the temporary directory written `[TMP]`).

`pytest --update-golden` (the `update_golden` fixture of tests/conftest.py) rewrites `expected`
from the actual run instead of comparing: review the diff.
"""
