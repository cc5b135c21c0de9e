"""Errors of `bigc data`.

A ``UserError`` is bad input (a file that is not a tokenizer, a bad JSON line, an output directory
that does not exist, ...): it is reported as one line, ``bigc data: MESSAGE``, exit status 1, with
nothing written. Anything else is an internal error (exit status 2, with a traceback).
"""


class UserError(Exception):
    """Bad input: reported as one line, exit status 1."""
