#!/usr/bin/env bash
# The project's self-checks, exactly as .ci/run runs them: ruff's lint and format check, strict
# mypy on the package, and csan-lint on its own code. Run from any directory with the test extra
# installed (pip install -e '.[test]'); every check runs, and the exit status is 1 if any failed.
set -uo pipefail
cd "$(dirname "$0")/.."

failed=()
check() {
    echo "== $*"
    "$@" || failed+=("$*")
}

check ruff check .
check ruff format --check .
check mypy  # what and how strictly: pyproject.toml's [tool.mypy]
# Not examples/: the demo is buggy on purpose, and tests/examples asserts its exact findings.
check csan-lint check csan_lint lint rules runtime benchmarks tests

if ((${#failed[@]})); then
    printf 'failed: %s\n' "${failed[@]}"
    exit 1
fi
echo "all checks passed"
