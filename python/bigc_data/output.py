"""Where `bigc data` writes its files, and what it tells the bigc driver.

Two modes:

* Standalone (``BIGC_RESULT_FD`` not set): each output file is written as a temporary file in its
  own directory, fsync'ed, and renamed over the final name (``os.replace``) only when everything
  succeeded; on an error the temporary files are removed, so nothing is left half-written.
* Under the bigc driver (``BIGC_RESULT_FD`` names an inherited file descriptor and ``BIGC_STAGING``
  is a JSON object mapping each absolute output directory to an absolute staging directory): the
  file ``<dir>/<name>`` is written as ``<staging of dir>/<name>``; on success one JSON object
  ``{"files": [final absolute paths], "message": summary line}`` goes to the descriptor (the
  driver moves the files into place and prints the message); on an error ``{"error": message}``.

The token files are llm.c's format (karpathy/llm.c dev/data/data_common.py): a header of 256
little-endian int32 (magic, version, token count, and in header[3] the tokenizer's vocabulary size,
which llm.c ignores and bigc's runtime checks), then the tokens: uint16 (magic 20240520, version 1)
for vocabularies of at most 65,536 tokens, else uint32 (magic 20240801, version 7).
"""

import json
import os
import tempfile

import numpy as np

from .errors import UserError

RESULT_FD_ENV = "BIGC_RESULT_FD"
STAGING_ENV = "BIGC_STAGING"

HEADER_INTS = 256
HEADER_BYTES = HEADER_INTS * 4
MAX_TOKENS = 2**31 - 1  # llm.c's header holds the count in an int32
# (magic, version, numpy dtype) by token width.
LAYOUTS = {
    "uint16": (20240520, 1, np.dtype("<u2")),
    "uint32": (20240801, 7, np.dtype("<u4")),
}


def layout_for_vocab(vocab_size):
    """The token type llm.c uses for a vocabulary: 'uint16' up to 65,536 tokens, else 'uint32'."""
    return "uint16" if vocab_size <= 65536 else "uint32"


# ---- the driver's result descriptor ---------------------------------------------------------

_result_sent = False


def driver_mode():
    return RESULT_FD_ENV in os.environ


def check_driver_env():
    """Under the driver: the descriptor is an open fd and the staging map is a JSON object of
    absolute paths. A bad value is the driver's bug: an internal error (RuntimeError)."""
    if not driver_mode():
        return
    raw = os.environ[RESULT_FD_ENV]
    try:
        fd = int(raw)
        os.fstat(fd)
    except (ValueError, OSError) as e:
        raise RuntimeError(f"{RESULT_FD_ENV}={raw!r} is not an open file descriptor ({e})") from None
    staging_map()


def send_result(obj):
    """Write the one JSON object to the driver's descriptor and close it (once; no-op standalone)."""
    global _result_sent
    if _result_sent or not driver_mode():
        return
    _result_sent = True
    fd = int(os.environ[RESULT_FD_ENV])
    data = (json.dumps(obj) + "\n").encode("utf-8")
    with os.fdopen(fd, "wb", closefd=True) as f:
        f.write(data)


def staging_map():
    raw = os.environ.get(STAGING_ENV)
    if raw is None:
        raise RuntimeError(f"{RESULT_FD_ENV} is set but {STAGING_ENV} is not")
    try:
        m = json.loads(raw)
    except ValueError as e:
        raise RuntimeError(f"{STAGING_ENV} is not JSON: {e}") from None
    if not isinstance(m, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in m.items()):
        raise RuntimeError(f"{STAGING_ENV} is not a JSON object of directory -> staging directory")
    return {os.path.normpath(k): v for k, v in m.items()}


# ---- output files ----------------------------------------------------------------------------

def _umask():
    old = os.umask(0)
    os.umask(old)
    return old


def check_output_path(path, what):
    """An output path's directory must exist and the path must not be a directory. Returns the
    absolute path. Called before any input is read."""
    final = os.path.abspath(path)
    d = os.path.dirname(final)
    if not os.path.isdir(d):
        raise UserError(f"{what} {path}: the directory {d} does not exist (create it first)")
    if os.path.isdir(final):
        raise UserError(f"{what} {path}: is a directory (name the .bin file to write)")
    if not os.access(d, os.W_OK | os.X_OK):
        raise UserError(f"{what} {path}: the directory {d} is not writable")
    if driver_mode():
        _staged_path(final)  # a directory missing from the map fails now, before any work
    return final


def _staged_path(final):
    d, name = os.path.split(final)
    m = staging_map()
    for key in (os.path.normpath(d), os.path.realpath(d)):
        if key in m:
            return os.path.join(m[key], name)
    raise RuntimeError(f"{STAGING_ENV} has no staging directory for the output directory {d} "
                       f"(it maps {sorted(m)})")


class OutputFile:
    """One output file: written at ``work`` (a temporary file beside it, or its staged path under
    the driver), put in place at ``final`` by commit(), removed by discard()."""

    def __init__(self, final, display):
        self.final = final
        self.display = display
        self.work = None
        self.f = None

    def open(self):
        d, name = os.path.split(self.final)
        try:
            if driver_mode():
                self.work = _staged_path(self.final)
                fd = os.open(self.work, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o666)
            else:
                fd, self.work = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=d)
                os.fchmod(fd, 0o666 & ~_umask())
        except OSError as e:
            raise UserError(f"cannot create {self.display}: {e.strerror or e}") from None
        self.f = os.fdopen(fd, "w+b")

    def finish(self):
        """Flush and fsync the file (before commit)."""
        try:
            self.f.flush()
            os.fsync(self.f.fileno())
            self.f.close()
        except OSError as e:
            raise UserError(f"writing {self.display}: {e.strerror or e}") from None
        self.f = None

    def commit(self):
        if driver_mode():
            return  # the driver moves the staged file into place
        try:
            os.replace(self.work, self.final)
        except OSError as e:
            raise UserError(f"cannot put {self.display} in place: {e.strerror or e}") from None
        self.work = None
        try:
            dfd = os.open(os.path.dirname(self.final), os.O_RDONLY)
            try:
                os.fsync(dfd)
            finally:
                os.close(dfd)
        except OSError:
            pass  # some file systems refuse fsync on a directory; the rename is done

    def discard(self):
        if self.f is not None:
            try:
                self.f.close()
            except OSError:
                pass
            self.f = None
        if self.work is not None:
            try:
                os.unlink(self.work)
            except FileNotFoundError:
                pass
            self.work = None


class TokenFile:
    """An llm.c token file being written: header placeholder, tokens appended, header at the end."""

    def __init__(self, out, layout, vocab_size):
        self.out = out
        self.layout = layout
        self.magic, self.version, self.dtype = LAYOUTS[layout]
        self.vocab_size = vocab_size
        self.count = 0

    def start(self):
        self.out.open()
        self._write(b"\0" * HEADER_BYTES)

    def _write(self, data):
        try:
            self.out.f.write(data)
        except OSError as e:
            raise UserError(f"writing {self.out.display}: {e.strerror or e}") from None

    def append(self, arr):
        assert arr.dtype == self.dtype
        self._write(memoryview(arr).cast("B"))
        self.count += arr.size

    def copy_tail_to(self, other, start):
        """Append this file's tokens [start, count) to `other` (the validation split)."""
        f = self.out.f
        item = self.dtype.itemsize
        try:
            f.flush()
            f.seek(HEADER_BYTES + start * item)
            left = (self.count - start) * item
            while left > 0:
                chunk = f.read(min(left, 16 << 20))
                if not chunk:
                    raise RuntimeError(f"{self.out.display}: short read copying the validation tokens")
                other._write(chunk)
                left -= len(chunk)
        except OSError as e:
            raise UserError(f"reading back {self.out.display}: {e.strerror or e}") from None
        other.count += self.count - start

    def truncate(self, count):
        self.count = count

    def finalize(self):
        """Write the header, cut the file to its tokens, fsync and close it."""
        if self.count > MAX_TOKENS:
            raise UserError(f"{self.out.display}: {self.count:,} tokens; llm.c's token files hold at "
                            f"most {MAX_TOKENS:,} (2^31-1): split the input into several files")
        header = np.zeros(HEADER_INTS, dtype="<i4")
        header[0], header[1], header[2], header[3] = self.magic, self.version, self.count, self.vocab_size
        f = self.out.f
        try:
            f.flush()
            f.truncate(HEADER_BYTES + self.count * self.dtype.itemsize)
            f.seek(0)
            f.write(header.tobytes())
        except OSError as e:
            raise UserError(f"writing {self.out.display}: {e.strerror or e}") from None
        self.out.finish()
