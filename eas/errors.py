"""EAS's own error types: what the CLI turns into a one-line message and exit code 2, and what
the library raises for bad input (a ValueError, so that `except ValueError` works)."""


class UserError(ValueError):
    """Bad input from the user: a message that says what is wrong, never a traceback."""


class ArgumentTypeError(UserError, TypeError):
    """An argument of a public function of the wrong type (a TypeError too)."""
