"""The runtime's version (the chart's appVersion and the operator's must match it)."""
__version__ = "0.1.0"
