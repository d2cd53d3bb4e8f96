"""The error every request-parameter check raises (the server turns it into a 400)."""
from __future__ import annotations


class ParameterError(ValueError):
    """A bad request parameter; ``param`` names it (the server turns this into a 400)."""

    def __init__(self, param: str, message: str):
        super().__init__(f"{param}: {message}")
        self.param = param
        self.message = message
