"""`python -m oracle`: main(), then exit at once (cli.exit_now): the interpreter's teardown of a
process that imported torch took about a second of a 10 s check on 2 cores, and frees nothing
the CLI still needs."""
from .cli import exit_now, main

exit_now(main())
