"""The dynamic half: a happens-before sanitizer for CUDA streams (engine, torch integration,
emulated device, pytest plugin). Importing this package does not import torch."""
