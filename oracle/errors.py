"""The one exception type the CLI turns into a one-line error, and the one-line rule."""


class OracleError(ValueError):
    """Bad input or a violated contract; the message names the problem."""


def one_line(text: str) -> str:
    """Control characters (a newline inside a user's argument, say) escaped: one line always."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text.strip())
