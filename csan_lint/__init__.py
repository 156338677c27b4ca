"""csan-lint: CUDA stream synchronization bugs, found statically and confirmed at run time."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("csan-lint")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0"
