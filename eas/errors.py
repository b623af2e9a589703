"""The one error type the CLI turns into a one-line message and exit code 2."""


class UserError(Exception):
    """Bad input from the user: a message that says what is wrong, never a traceback."""
