"""`python -m quantkit`: the same command as the `quantkit` console script, with the same exit code."""

import atexit
import os
import sys

from .cli import main

try:
    main()
except SystemExit as exc:
    if exc.code not in (130, 143):
        raise
    # Ctrl-C or SIGTERM, already handled: clean-up ran and "interrupted" was printed. Under `python -m`,
    # CPython ends the process by SIGINT (returncode -2) instead of exiting 130 whenever a
    # KeyboardInterrupt once escaped an exec/eval of a source string (a dataclass or namedtuple
    # being built at that moment, inside a library), even though it was caught afterwards: a
    # sticky interpreter flag that the console script's path never consults. Exit as that does.
    atexit._run_exitfuncs()  # the vLLM server safety net and logging's flush, as at a normal exit
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(exc.code)
