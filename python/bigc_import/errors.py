"""Errors of the importer.

A ``UserError`` is bad input (an unsupported op, a config of another family, weights that do not
match, a module torch.export cannot capture): the command line prints its message as one line,
``bigc import: MESSAGE``, and exits 1 with nothing written. Anything else is an internal error
(exit 2, with a traceback).
"""


class UserError(Exception):
    """Bad input: reported as one line, exit status 1."""
