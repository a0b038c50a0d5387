"""User-facing errors: the CLI prints them as one line and exits non-zero, without a traceback."""


class UserError(Exception):
    """A mistake the user can fix (bad file, bad flag, bad field). The message says what and how."""
