"""The shell around the analysis: the command line, file discovery and the text prefilter, the
cache and the project index kept across runs, the process pool and the budget, suppressions,
reporters, `--fix`, `reveal` and the language server. Nothing outside this package imports it
(tests/lint/test_layers.py): the analysis knows nothing of how it is run."""
