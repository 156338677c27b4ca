"""One entry of the table of what the analysis assumes (lint/analysis/assumptions.py): its
name, what it takes for granted and why, its default, and an example whose findings change
with it. Pure data."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Assumption:
    name: str
    summary: str
    """One line: what is taken for granted."""
    doc: str
    """Why, what it finds, what it costs (the measurement behind its default)."""
    default: bool
    rules: tuple[str, ...]
    """The rule codes whose findings may rest on it."""
    example: str
    """A module whose findings change with the assumption (docs and tests run it both ways)."""
    when_on: tuple[tuple[str, int], ...]
    """The example's findings (code, line) when the assumption holds."""
    when_off: tuple[tuple[str, int], ...]
    """And when it does not."""
    evidence: bool = False
    """A shape of code taken as evidence of a second stream (a detector), rather than a
    producer or entry stream assumed where none is visible."""
