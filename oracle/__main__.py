"""`python -m oracle`: main(), then exit at once (cli.exit_now): the interpreter's teardown of a
process that imported torch took about a second of a 10 s check on 2 cores, and frees nothing
the CLI still needs. The cyclic garbage collector runs every 50000 allocations instead of 700:
the imports and the traces make many objects and few cycles, and at 700 its 490 collections took
0.44 s of `check --backend torch-cpu-bf16` (0.15 s at 50000; 2026-12-01). SIGTERM and SIGHUP end
the run as Ctrl-C does (oracle/runtime/cancel.py), set up before any thread starts."""

import gc

gc.set_threshold(50_000, 10, 10)

from .runtime.cancel import install  # noqa: E402

install()

from .cli import exit_now, main  # noqa: E402 -- after the threshold: the imports allocate the most

exit_now(main())
