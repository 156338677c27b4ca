#!/usr/bin/env bash
# The GPU check, for a machine with an NVIDIA GPU and no network (docs/ci.md, "GPU job"):
# installs csan-lint and its dependencies from the wheels beside this script (made by
# build_wheels.sh on a machine with network) into a venv that sees the machine's own torch,
# then runs benchmarks/gpu/check.py. Under 8 minutes.
#
#   bash benchmarks/gpu/check.sh [--device cuda|emulated] [--torch-tests test_cuda.py] [--json PATH]
#
# CSAN_WHEELS: the wheel folder (default benchmarks/gpu/wheels); CSAN_CHECK_VENV: the venv
# (default .gpu-check-venv, made once, reused); PYTHON: the interpreter that has torch.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
wheels="${CSAN_WHEELS:-$here/wheels}"
venv="${CSAN_CHECK_VENV:-$repo/.gpu-check-venv}"
python="${PYTHON:-python3}"

if ! "$python" -c "import torch" 2>/dev/null; then
    echo "check.sh: $python has no torch: the check uses the machine's own torch (set PYTHON)" >&2
    exit 2
fi
if [ ! -d "$wheels" ] || ! ls "$wheels"/csan_lint-*.whl >/dev/null 2>&1; then
    echo "check.sh: no csan_lint wheel in $wheels: run benchmarks/gpu/build_wheels.sh where there is network" >&2
    exit 2
fi
if [ ! -x "$venv/bin/python" ]; then
    "$python" -m venv --system-site-packages "$venv"  # the machine's torch stays visible
    if ! "$venv/bin/python" -c "import torch" 2>/dev/null; then
        # $python is itself a venv: point the new one at the folder its torch lives in.
        torch_site="$("$python" -c 'import os, torch; print(os.path.dirname(os.path.dirname(torch.__file__)))')"
        venv_site="$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
        echo "$torch_site" > "$venv_site/machine-torch.pth"
    fi
fi
# Offline: only the carried wheels; the newest csan-lint wheel replaces an installed one.
"$venv/bin/python" -m pip install --quiet --no-index --find-links "$wheels" --upgrade --force-reinstall --no-deps \
    "$(ls -t "$wheels"/csan_lint-*.whl | head -n 1)"
"$venv/bin/python" -m pip install --quiet --no-index --find-links "$wheels" libcst click pathspec pytest coverage pytest-xdist
extra=()
if [ -f "$wheels/test_cuda.py" ]; then  # fetched by build_wheels.sh with TORCH_TAG
    "$venv/bin/python" -m pip install --quiet --no-index --find-links "$wheels" numpy expecttest psutil || true
    case " $* " in *" --torch-tests "*) ;; *) extra=(--torch-tests "$wheels/test_cuda.py") ;; esac
fi
cd "$repo"
exec "$venv/bin/python" benchmarks/gpu/check.py ${extra[@]+"${extra[@]}"} "$@"
