"""The rule catalog: one rule per module, found by discovery (see csan_lint.lint.registry)."""
