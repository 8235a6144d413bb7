"""User-facing errors: the CLI prints these as one line (no traceback unless --debug)."""


class UserError(Exception):
    """Bad input or a request that cannot be met; the message says what and where."""
