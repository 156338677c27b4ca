"""The warnings the sanitizer gives the user's program: the categories a user filters on, and
the one way they are given, which never raises into the user's code."""

from __future__ import annotations

import warnings


class CsanInternalWarning(RuntimeWarning):
    """The sanitizer hit a bug of its own; checking stops, the user's program goes on."""


class CsanBlockingUnknownWarning(RuntimeWarning):
    """The sanitizer could not tell whether a stream made outside torch is blocking; it takes it
    as non-blocking (a race reported between it and the default stream may be false)."""


class CsanSkipWarning(RuntimeWarning):
    """Ops on a tensor type with no storage the sanitizer can see into are not checked (told
    once per type); checking goes on for everything else."""


def warn(message: str, category: type[Warning], stacklevel: int) -> None:
    """`warnings.warn` as if called where this is (`stacklevel` counts from there)."""
    try:
        warnings.warn(message, category, stacklevel=stacklevel + 1)
    except Warning:
        pass  # warnings turned into errors (-W error) must not reach the user's code
