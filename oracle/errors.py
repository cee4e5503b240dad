"""The one exception type the CLI turns into a one-line error."""


class OracleError(ValueError):
    """Bad input or a violated contract; the message names the problem."""
