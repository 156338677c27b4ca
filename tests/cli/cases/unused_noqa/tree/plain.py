import os  # noqa: CSL101, E501
x = 1  # noqa
y = 2  # csan-lint: ignore
