"""Every file the oracle reads goes through here: a regular file of bounded size, opened
without blocking, and JSON of bounded nesting. A named pipe, a device (/dev/zero, a link to
it), a socket or a folder is refused at once instead of hanging or filling memory; a file over
its kind's size limit, or JSON nested deeper than MAX_JSON_DEPTH, is refused before it is
parsed. Each refusal is one OracleError line naming the file and what is wrong with it
(docs/cli_inputs.md, "Files the oracle reads").

    open_regular(path, label, kind) -> a binary file object (the caller closes it)
    check_regular(path, label, kind) -> size in bytes (for files a library opens by path)
    read_bytes / read_text / read_json(path, label, kind)

And every file it writes: `check_output(path, option, inputs)` before the work (a name in a folder
that takes a file, not a special file, not an input), then oracle/atomic.py's `replacing(*paths)`:
temporary files beside the paths, renamed onto them at the end, removed on failure (docs/cli_inputs.md, "Files the
oracle writes").

`label` names the file in messages ("trace file", "c-table"; the path follows it); `kind` is
a key of LIMITS: the file's size limit and what the limit is for.
"""

from __future__ import annotations

import json
import os
import re
import stat
import tempfile

import numpy as np

from .errors import OracleError, printable

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30
# kind -> (the largest file of it the oracle reads, in bytes; what the limit is for): sizes
# well past any real file of the kind
LIMITS = {
    "trace": (1 * GiB, "a trace"),  # a trace's JSON (the arrays are in its NPZ)
    "trace arrays": (16 * GiB, "a trace's NPZ"),  # KV writes and logits of every round
    "c-table": (64 * MiB, "a c-table"),
    "config.json": (16 * MiB, "a config.json"),
    "index": (256 * MiB, "a safetensors index"),  # model.safetensors.index.json
    "safetensors": (1 << 40, "a safetensors shard"),  # mapped by safetensors, not read whole
    "gemv config": (1 * MiB, "a GEMV tile config"),  # LOOPSPEC_GEMV_CONFIG
}
MAX_JSON_DEPTH = 512  # nesting of arrays and objects; the deepest file the oracle writes nests 6

KINDS = (
    (stat.S_ISFIFO, "a named pipe"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISDIR, "a folder"),
)


def size_text(n: int) -> str:
    """Bytes in the largest unit that keeps a number >= 1: 3.2 GB, 12.0 MB, 512 bytes."""
    for unit, scale in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} bytes"


def limit_text(n: int) -> str:
    """A limit in binary units: 1 GiB, 64 MiB."""
    for unit, scale in (("TiB", 1 << 40), ("GiB", GiB), ("MiB", MiB), ("KiB", KiB)):
        if n >= scale and n % scale == 0:
            return f"{n // scale} {unit}"
    return f"{n} bytes"


def _kind_of(mode: int) -> str:
    return next((what for test, what in KINDS if test(mode)), "not a regular file")


def _label(label: str, path) -> str:
    """'trace file a.json' (or 'VAR=path' for a label ending in '='), control characters escaped."""
    sep = "" if not label or label.endswith("=") else " "
    return printable(f"{label}{sep}{os.fspath(path)}")


def _refuse_stat(st: os.stat_result, name: str, kind: str) -> None:
    if not stat.S_ISREG(st.st_mode):
        what = _kind_of(st.st_mode)
        raise OracleError(f"{name} is {what}" + ("" if what == "not a regular file" else ", not a regular file"))
    limit, what = LIMITS[kind]
    if st.st_size > limit:
        raise OracleError(f"{name} is {size_text(st.st_size)}, over the {limit_text(limit)} limit for {what}")


def open_regular(path, label: str, kind: str):
    """The file opened for reading (binary) once it is known to be a regular file within its
    kind's size limit (LIMITS). O_NONBLOCK: opening a named pipe with no writer returns at
    once, and fstat then refuses it; the descriptor blocks again for the reads."""
    name = _label(label, path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise OracleError(f"{name} does not exist") from None
    except IsADirectoryError:
        raise OracleError(f"{name} is a folder, not a regular file") from None
    except OSError as e:  # permission, a socket (ENXIO), a dangling link's loop, ...
        raise OracleError(f"{name}: cannot open it ({e.strerror or e})") from None
    try:
        _refuse_stat(os.fstat(fd), name, kind)
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def check_regular(path, label: str, kind: str) -> int:
    """open_regular's checks for a file a library opens by path (safetensors, say); its size."""
    with open_regular(path, label, kind) as f:
        return os.fstat(f.fileno()).st_size


def read_bytes(path, label: str, kind: str) -> bytes:
    """The whole file, checked by open_regular; never more than its limit read (a file that
    grows while it is read is refused)."""
    limit = LIMITS[kind][0]
    with open_regular(path, label, kind) as f:
        data = f.read(limit + 1)
    if len(data) > limit:
        raise OracleError(f"{_label(label, path)} grew past the {limit_text(limit)} limit while it was read")
    return data


def read_text(path, label: str, kind: str) -> str:
    """The file as UTF-8 text."""
    data = read_bytes(path, label, kind)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise OracleError(f"{_label(label, path)} is not UTF-8 text ({e.reason} at byte {e.start})") from None


# a JSON string (escapes included); what is left outside strings holds the brackets
_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"', re.DOTALL)
_OTHER = bytes(b for b in range(256) if b not in b"[]{}")
_STEP = np.zeros(256, np.int8)
_STEP[list(b"[{")], _STEP[list(b"]}")] = 1, -1


def json_depth(data: bytes) -> int:
    """The deepest nesting of arrays and objects in JSON text, counted without parsing (and so
    without recursion): brackets outside strings, at C speed."""
    brackets = _STRING.sub(b"", data).translate(None, _OTHER)
    if not brackets:
        return 0
    return int(np.cumsum(_STEP[np.frombuffer(brackets, np.uint8)], dtype=np.int64).max())


def parse_json(data: bytes, name: str, max_depth: int = MAX_JSON_DEPTH):
    """JSON text (UTF-8 bytes) parsed once its nesting is known to be at most max_depth."""
    depth = json_depth(data)
    if depth > max_depth:
        raise OracleError(f"{name} nests deeper than {max_depth} levels ({depth}): not a file the oracle reads")
    try:
        return json.loads(data.decode("utf-8"))
    except UnicodeDecodeError as e:
        raise OracleError(f"{name} is not valid JSON (not UTF-8: {e.reason} at byte {e.start})") from None
    except json.JSONDecodeError as e:
        raise OracleError(f"{name} is not valid JSON ({e})") from None
    except RecursionError:  # not reached below max_depth; said in one line all the same
        raise OracleError(f"{name} nests too deeply to parse") from None


def read_json(path, label: str, kind: str, max_depth: int = MAX_JSON_DEPTH):
    """The file's JSON value: a regular file within its kind's limit, nested at most max_depth."""
    return parse_json(read_bytes(path, label, kind), _label(label, path), max_depth)


# ---- files the oracle writes (issue 62): checked before the work, written whole or not at all ----


def check_output(path, option: str, inputs=(), also=()) -> None:
    """An output file named by `option` (`--out`), checked before any work: a name, not a folder or
    a special file (a device, a pipe: /dev/full), in a folder that exists and takes a new file (tried:
    a probe file made and removed, so /proc and read-only folders are refused), and none of the
    command's `inputs` (`trace cut a.json --out a.json`). also: files written beside it (the trace's
    NPZ), checked the same way. Each refusal is one OracleError line starting with the option and path."""
    path = os.fspath(path)
    name = printable(f"{option} {path}")
    if path.strip() == "":
        raise OracleError(f"{option}: empty file name")
    for out in (path, *map(os.fspath, also)):
        if os.path.isdir(out):
            raise OracleError(f"{name}: {printable(out)} is a folder; give a file name")
        if os.path.lexists(out) and os.path.exists(out):
            mode = os.stat(out).st_mode
            if not stat.S_ISREG(mode):
                raise OracleError(f"{name}: {printable(out)} is {_kind_of(mode)}, not a regular file")
        for given in inputs:
            if _same(out, given):
                raise OracleError(
                    f"{name}: {printable(out)} is an input of the command ({printable(given)}); give another name"
                )
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise OracleError(f"{name}: folder {printable(os.path.dirname(path) or '.')} does not exist")
    try:
        try_write_in(folder)
    except OSError as e:
        raise OracleError(f"{name}: cannot write in {printable(folder)} ({e.strerror or e})") from None


def try_write_in(folder, prefix: str = ".oracle-probe-") -> None:
    """Make and remove a probe file in folder: writability tried, not guessed from permission
    bits (an OSError where it fails)."""
    fd, probe = tempfile.mkstemp(dir=folder, prefix=prefix)
    os.close(fd)
    os.unlink(probe)


def _same(a, b) -> bool:
    """Whether paths a and b name one file (the same path, a link to it, or a hard link)."""
    try:
        if os.path.exists(a) and os.path.exists(b):
            return os.path.samefile(a, b)
    except OSError:
        pass
    return os.path.realpath(a) == os.path.realpath(b)


def write_text(path, text: str) -> None:
    """text written to path whole (oracle/atomic.py `replacing`)."""
    from .atomic import replacing

    with replacing(path) as (tmp,):
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
