#!/usr/bin/env bash
# Builds the wheels benchmarks/gpu/check.sh installs offline on the GPU machine: csan-lint
# itself and its dependencies (libcst, click, pathspec, with theirs) plus what the check runs
# (pytest, coverage, pytest-xdist), for the GPU machine's Python and platform. Not torch: the
# check uses the machine's own. Run from a checkout, on a machine with network:
#
#   bash benchmarks/gpu/build_wheels.sh [PYTHON_VERSION] [PLATFORM]   # defaults: 3.12 manylinux2014_x86_64
#
# The wheels land in benchmarks/gpu/wheels/ (git-ignored): carry that folder with the checkout.
# TORCH_TAG=v2.11.0 (the GPU machine's torch) also fetches that tag's test/test_cuda.py and the
# wheels its TestCase needs (numpy, expecttest, psutil), for the TestCuda step; it is PyTorch's
# code, fetched, never committed.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
version="${1:-3.12}"
platform="${2:-manylinux2014_x86_64}"
out="$here/wheels"
mkdir -p "$out"
python3 -m pip download --quiet --dest "$out" --only-binary=:all: --python-version "$version" \
    --platform "$platform" --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
    "libcst>=1.1" "click>=8.1" "pathspec>=0.12" "pytest>=8" "coverage>=7.4" "pytest-xdist>=3.8"
python3 -m pip wheel --quiet --no-deps --wheel-dir "$out" "$repo"
if [ -n "${TORCH_TAG:-}" ]; then
    python3 -m pip download --quiet --dest "$out" --only-binary=:all: --python-version "$version" \
        --platform "$platform" --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
        numpy expecttest psutil
    curl -fsSL -o "$out/test_cuda.py" "https://raw.githubusercontent.com/pytorch/pytorch/$TORCH_TAG/test/test_cuda.py"
fi
ls "$out"
