"""Imports nothing flagged: --confirm must not run it."""


def test_arithmetic():
    assert 1 + 1 == 2
