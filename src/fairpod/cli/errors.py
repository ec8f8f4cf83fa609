"""The CLI's error type: printed as one line to stderr, never as a traceback."""

from __future__ import annotations


class CliError(Exception):
    """An error for the user: printed as one line, exit code ``code``; ``status`` is the HTTP status of an API
    error (None for errors found before anything was sent)."""

    def __init__(self, msg: str, code: int = 1, status: int | None = None):
        super().__init__(msg)
        self.code = code
        self.status = status
