"""Files written whole or not at all (issue 62): `replacing(*paths)` gives temporary files beside
the paths, renamed onto them when the work ends without error and removed when it fails or the run
is cancelled (oracle/runtime/cancel.py removes those in TEMPORARY). Standard library only: the trace writer
(oracle/trace_file.py) uses it without deepening its imports."""

from __future__ import annotations

import os
import tempfile
from contextlib import contextmanager

TEMPORARY: set = set()  # the temporary files of writes not finished (a cancelled run removes them)


@contextmanager
def replacing(*paths):
    """`with replacing(out, out_npz) as (tmp, tmp_npz):` write the temporary files; when the block
    ends without error each is renamed onto its path (in order: the JSON that names the NPZ last);
    when it fails, or the run is cancelled (oracle/runtime/cancel.py), they are removed and nothing of a half
    write is left. Each temporary file is in its path's folder (a rename, not a copy)."""
    temps: list = []
    mask = os.umask(0)
    os.umask(mask)
    try:
        for p in map(os.fspath, paths):
            folder, base = os.path.split(os.path.abspath(p))
            fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{base}.", suffix=".tmp")
            os.close(fd)
            TEMPORARY.add(tmp)
            temps.append(tmp)
        yield temps
        for tmp, p in zip(temps, paths):
            os.chmod(tmp, 0o666 & ~mask)  # as open() would have made it (mkstemp's is 0600)
            os.replace(tmp, p)
    finally:
        for tmp in temps:
            try:
                os.unlink(tmp)
            except OSError:  # renamed: nothing left
                pass
            TEMPORARY.discard(tmp)
