"""The one exception type the CLI turns into a one-line error, the one-line rule, and the
one way a user's names (backend names, file names, case names) are printed: `printable`."""


class OracleError(ValueError):
    """Bad input or a violated contract; the message names the problem."""


class Refused(BaseException):
    """Bad input found once the work has begun (a plug-in's session that breaks the contract, found at
    the first session() call): one line, exit 2, as an OracleError. A BaseException, so that the
    judge's `except Exception` (where a backend's error is a failed check) lets it through."""


def printable(text) -> str:
    """Control characters escaped as Python writes them (a newline as \\n, ESC as \\x1b): a
    user-given name printed this way cannot break a line or colour the terminal."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in str(text))


def one_line(text: str) -> str:
    """Control characters (a newline inside a user's argument, say) escaped: one line always."""
    return printable(text.strip())
