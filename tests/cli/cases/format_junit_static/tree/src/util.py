def scale(values, factor):
    """No CUDA streams here: the prefilter skips this file without parsing it."""
    return [value * factor for value in values]
