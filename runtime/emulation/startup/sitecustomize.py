"""Imported by every Python process started while the emulated device is on (children.py puts
this directory on `PYTHONPATH`): turns the device on in the child once it imports torch, then
runs the user's own `sitecustomize`, which this one shadows."""

import importlib
import os
import sys


def _start() -> None:
    try:
        from csan_lint.runtime.emulation.children import start_child
    except ImportError as error:  # another interpreter, without csan-lint: it runs unemulated
        sys.stderr.write(f"csan-lint: this child process runs without the emulated device ({error})\n")
    else:
        start_child()
    here = os.path.dirname(os.path.abspath(__file__))
    ours = sys.modules.pop("sitecustomize", None)
    saved = sys.path[:]
    sys.path[:] = [entry for entry in sys.path if os.path.abspath(entry or os.curdir) != here]
    try:
        importlib.import_module("sitecustomize")  # the user's own, if there is one
    except ImportError:
        if ours is not None:
            sys.modules["sitecustomize"] = ours
    finally:
        sys.path[:] = saved


_start()
