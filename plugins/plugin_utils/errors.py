"""Errors the CLI turns into one clear line instead of a traceback."""


class UsageError(Exception):
    """A bad argument or input file; printed as one line, exit code 2."""
