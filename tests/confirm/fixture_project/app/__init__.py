"""Flagged code, one module per verdict the --confirm end-to-end test expects."""
