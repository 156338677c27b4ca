"""Where the static benchmarks find the torch package they lint: the installed one, found without
importing it (importing torch takes seconds)."""

from __future__ import annotations

import sys
from pathlib import Path


def default_torch_root() -> Path:
    """The installed torch package's directory; exits with a hint when there is none."""
    for entry in sys.path:
        candidate = Path(entry or ".") / "torch"
        if (candidate / "__init__.py").is_file():
            return candidate.resolve()
    raise SystemExit("torch is not installed here: pass --torch-root DIR")
