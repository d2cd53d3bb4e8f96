"""The operator's version (released with the runtime; tests keep the two equal)."""
__version__ = "0.1.0"
