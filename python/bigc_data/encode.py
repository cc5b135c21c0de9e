"""`bigc data encode INPUT... --tokenizer PATH -o OUT.bin`: text -> llm.c token file(s)."""

import argparse
import os
import sys
import time
from collections import deque
from fractions import Fraction
from itertools import chain

from . import output
from .errors import UserError

DESCRIPTION = """\
Encode text with your model's own Hugging Face tokenizer into llm.c's token file format (the
format `bigc run --data` reads; nanoGPT/llm.c tools read it too).

Inputs: one or more files. With --format auto (the default) a .jsonl or .json file is JSON lines
(one JSON object per line; the document is its --text-field, default "text"; blank lines are
skipped) and any other file is plain UTF-8 text, the whole file being ONE document.

Documents: every document is preceded by one separator token, and each is encoded WITHOUT the
tokenizer's own special tokens (add_special_tokens=False), so the separator is the only special
token in the stream. --separator auto (the default) is the tokenizer's BOS token if it has one
(bos_token of tokenizer_config.json, else an added special token among <|begin_of_text|>, <s>,
<bos>), else its end-of-text token (eos_token of tokenizer_config.json, else one of
<|endoftext|>, <|end_of_text|>, </s>, <eos>) -- what llm.c's and nanoGPT's preprocessing do
(GPT-2: <|endoftext|> before every document). --separator TOKEN names the token; --separator none
puts nothing between documents. A special token written literally in the text (e.g.
"<|endoftext|>") is encoded as that token, as the tokenizer itself does. Truncation and padding
stored in tokenizer.json are ignored.

Output: a header of 256 little-endian int32 (magic, version, token count, and the tokenizer's
vocabulary size in header[3], which bigc's runtime checks against the model), then the tokens:
uint16 (magic 20240520, version 1) for vocabularies of at most 65,536 tokens, else uint32 (magic
20240801, version 7). At most 2^31-1 tokens per file. Files are written whole or not at all.

Validation: --val-fraction F also writes the last fraction F of the token stream to --val-output
(default: OUT with _val before its extension). With 2 or more documents the split is at the first
document start at or after (1-F) of the tokens, so validation documents are whole; else (or when
that would leave the validation file empty) at the exact token position.

Speed: documents are encoded in batches, in parallel over --threads (default: all cores). A large
document is cut into pieces only where that provably gives the same tokens as encoding it whole:
for ByteLevel tokenizers (GPT-2, LLaMA-3, Qwen2 style) without a normalizer or prefix space, right
after a newline between two ASCII non-space characters; any other tokenizer encodes it whole.
"""


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        raise UserError(f"{message} (see bigc data encode --help)")


def build_parser():
    p = _Parser(prog="bigc data encode", add_help=False, allow_abbrev=False,
                usage="bigc data encode INPUT... --tokenizer PATH -o OUT.bin [options]",
                description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("inputs", nargs="*", metavar="INPUT", help="text (.txt, ...) or JSON lines (.jsonl, .json) files")
    p.add_argument("--tokenizer", metavar="PATH",
                   help="a Hugging Face tokenizer.json, or a model directory holding tokenizer.json "
                        "(and tokenizer_config.json, read for bos_token/eos_token when present)")
    p.add_argument("-o", "--output", metavar="OUT.bin", help="the token file to write")
    p.add_argument("--val-fraction", metavar="F", help="0 < F < 1: also write the last fraction F of the tokens "
                                                       "as a validation file")
    p.add_argument("--val-output", metavar="VAL.bin", help="the validation file (default: OUT_val.bin)")
    p.add_argument("--format", choices=("auto", "text", "jsonl"), default="auto",
                   help="auto (default): .jsonl/.json files are JSON lines, others plain text")
    p.add_argument("--text-field", metavar="NAME", help='the field of each JSON line holding the document (default "text")')
    p.add_argument("--separator", metavar="TOKEN|none|auto", default="auto",
                   help="the token before each document (default auto: BOS, else end-of-text; see above)")
    p.add_argument("--threads", metavar="N", help="encoding threads (default: all cores; sets RAYON_NUM_THREADS)")
    p.add_argument("--quiet", action="store_true", help="no progress line")
    p.add_argument("-h", "--help", action="store_true", help="show this help and exit")
    return p


# ---- progress --------------------------------------------------------------------------------

class Progress:
    """A progress line on stderr: updated in place at most 5 times a second on a terminal, a new
    line every 10 s otherwise; nothing with --quiet."""

    def __init__(self, total_bytes, quiet):
        self.total = total_bytes
        self.enabled = not quiet
        self.tty = self.enabled and sys.stderr.isatty()
        self.t0 = time.monotonic()
        self.last = self.t0
        self.width = 0

    def update(self, done_bytes, tokens, force=False):
        if not self.enabled:
            return
        now = time.monotonic()
        if now - self.last < (0.2 if self.tty else 10.0) and not (force and self.tty):
            return
        self.last = now
        secs = max(now - self.t0, 1e-9)
        pct = 100.0 * done_bytes / self.total if self.total else 100.0
        line = (f"bigc data: {done_bytes / 1e6:,.1f} / {self.total / 1e6:,.1f} MB ({pct:.0f}%), "
                f"{done_bytes / 1e6 / secs:.1f} MB/s, {tokens:,} tokens, {secs:.0f} s")
        if self.tty:
            sys.stderr.write("\r" + line.ljust(self.width))
            self.width = len(line)
        else:
            sys.stderr.write(line + "\n")
        sys.stderr.flush()

    def clear(self):
        if self.tty and self.width:
            sys.stderr.write("\r" + " " * self.width + "\r")
            sys.stderr.flush()
            self.width = 0


PROGRESS = None  # the current run's, for __main__ to clear before an error line


def clear_progress():
    if PROGRESS is not None:
        PROGRESS.clear()


# ---- inputs ----------------------------------------------------------------------------------

class Input:
    def __init__(self, path, kind, size):
        self.path = path
        self.kind = kind  # "text" or "jsonl"
        self.size = size


def check_inputs(paths, fmt):
    inputs = []
    for p in paths:
        if not os.path.exists(p):
            raise UserError(f"{p}: no such file")
        if os.path.isdir(p):
            raise UserError(f"{p}: is a directory (give the text or JSON lines files)")
        if not os.access(p, os.R_OK):
            raise UserError(f"{p}: not readable")
        kind = fmt
        if fmt == "auto":
            kind = "jsonl" if os.path.splitext(p)[1].lower() in (".jsonl", ".json") else "text"
        inputs.append(Input(p, kind, os.path.getsize(p)))
    return inputs


class Segment:
    """Texts to encode from one file: documents, or pieces of documents cut at safe points.
    new_doc[i]: whether texts[i] starts a document (None: all of them do)."""
    __slots__ = ("texts", "new_doc", "nbytes", "path")

    def __init__(self, texts, new_doc, nbytes, path):
        self.texts = texts
        self.new_doc = new_doc
        self.nbytes = nbytes
        self.path = path


def _utf8(data, path, base, where=""):
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise UserError(f"{path}{where}: not valid UTF-8 text (byte offset {base + e.start}: "
                        f"{e.reason}); convert it to UTF-8") from None


def _read_error(path, e):
    return UserError(f"{path}: cannot read it: {e.strerror or e}")


def text_segments(inp, split, piece_bytes):
    """A plain text file: one document; read in pieces cut at safe points when `split`."""
    from .tok import SPLIT_POINT_BYTES
    try:
        f = open(inp.path, "rb")
    except OSError as e:
        raise _read_error(inp.path, e) from None
    with f:
        try:
            if not split:
                data = f.read()
                yield Segment([_utf8(data, inp.path, 0)], None, len(data), inp.path)
                return
            buf = bytearray()
            base = 0  # the file offset of buf[0]
            first = True
            eof = False
            search_from = piece_bytes
            texts, flags, nbytes = [], [], 0
            while True:
                while not eof and len(buf) < search_from + piece_bytes:
                    chunk = f.read(max(piece_bytes, 1 << 20))
                    if chunk:
                        buf += chunk
                    else:
                        eof = True
                m = None
                if not eof or len(buf) > piece_bytes * 3 // 2:
                    m = SPLIT_POINT_BYTES.search(buf, search_from)
                if m is None and not eof:
                    search_from = max(len(buf) - 2, piece_bytes)  # no cut point yet: read on
                    continue
                cut = m.end() if m is not None else len(buf)
                if cut or first:
                    texts.append(_utf8(buf[:cut], inp.path, base))
                    flags.append(first)
                    nbytes += cut
                first = False
                del buf[:cut]
                base += cut
                search_from = piece_bytes
                if nbytes >= (1 << 20) or (eof and not buf):
                    yield Segment(texts, flags, nbytes, inp.path)
                    texts, flags, nbytes = [], [], 0
                if eof and not buf:
                    return
        except OSError as e:
            raise _read_error(inp.path, e) from None


def _kind(v):
    return "null" if v is None else {"list": "array", "dict": "object", "str": "string", "int": "number",
                                     "float": "number", "bool": "boolean"}.get(type(v).__name__, "value")


def _jsonl_doc(path, lineno, obj, field):
    where = f":{lineno}"
    if not isinstance(obj, dict):
        raise UserError(f"{path}{where}: a JSON {_kind(obj)}, not an object with a {field!r} field")
    if field not in obj:
        keys = ", ".join(list(obj)[:6])
        raise UserError(f"{path}{where}: no {field!r} field (it has: {keys or 'no fields'}); "
                        f"name the document's field with --text-field")
    doc = obj[field]
    if not isinstance(doc, str):
        raise UserError(f"{path}{where}: the {field!r} field is a JSON {_kind(doc)}, not a string")
    try:
        doc.encode("utf-8")
    except UnicodeEncodeError as e:
        raise UserError(f"{path}{where}: the document holds an unpaired surrogate U+{ord(doc[e.start]):04X} "
                        f"(a lone \\u{ord(doc[e.start]):04x} escape, or invalid UTF-8), which is not "
                        f"Unicode text") from None
    return doc


def _jsonl_slow(path, lines, lineno, offset, field):
    """Lines -> documents one by one, raising the exact error (file:line, byte offset)."""
    import json
    docs = []
    for line in lines:
        lineno += 1
        if not line.isspace():
            where = f":{lineno}"
            text = _utf8(line, path, offset, where)
            try:
                obj = json.loads(text)
            except ValueError as e:
                detail = f"{e.msg} at column {e.colno}" if hasattr(e, "colno") else str(e)
                raise UserError(f"{path}{where}: not valid JSON ({detail}); each line must be one JSON "
                                f"object") from None
            docs.append(_jsonl_doc(path, lineno, obj, field))
        offset += len(line)
    return docs


# Where a JSON chunk may hold a surrogate: a \uD800-\uDFFF escape, or one encoded in the bytes.
_SURROGATE = __import__("re").compile(rb"\\u[dD][89a-fA-F]|\xed[\xa0-\xbf]")


def jsonl_segments(inp, field, split, piece_chars):
    """A JSON lines file: a document per non-blank line. Lines are parsed a few MB at a time as
    one JSON array (one C call); a chunk that fails, that parses to another number of values than it
    has lines, or whose values are not all objects with a string field, is parsed again line by line
    for the exact error."""
    import json
    from .tok import split_points_str
    try:
        f = open(inp.path, "rb")
    except OSError as e:
        raise _read_error(inp.path, e) from None
    with f:
        offset = 0
        lineno = 0
        try:
            while True:
                lines = f.readlines(1 << 20)
                if not lines:
                    return
                nbytes = sum(map(len, lines))
                kept = [l for l in lines if not l.isspace()]
                docs = None
                if kept:
                    joined = b"[" + b",".join(kept) + b"]"
                    try:
                        values = json.loads(joined)
                        if len(values) == len(kept):
                            docs = [v[field] for v in values]
                            if set(map(type, docs)) != {str}:
                                docs = None
                            elif _SURROGATE.search(joined) and not all(d.isascii() or _encodable(d) for d in docs):
                                docs = None
                    except (ValueError, UnicodeDecodeError, TypeError, KeyError):
                        docs = None
                    if docs is None:
                        docs = _jsonl_slow(inp.path, lines, lineno, offset, field)
                lineno += len(lines)
                offset += nbytes
                if not docs:
                    continue
                if split and max(map(len, docs)) > piece_chars * 2:
                    texts, flags = [], []
                    for doc in docs:
                        pieces = split_points_str(doc, piece_chars) if len(doc) > piece_chars * 2 else [doc]
                        texts += pieces
                        flags.append(True)
                        flags += [False] * (len(pieces) - 1)
                    yield Segment(texts, flags, nbytes, inp.path)
                else:
                    yield Segment(docs, None, nbytes, inp.path)
        except OSError as e:
            raise _read_error(inp.path, e) from None


def _encodable(s):
    try:
        s.encode("utf-8")
        return True
    except UnicodeEncodeError:
        return False


class Batch:
    __slots__ = ("texts", "new_doc", "nbytes")

    def __init__(self):
        self.texts, self.new_doc, self.nbytes = [], None, 0

    def add(self, seg):
        if seg.new_doc is not None and self.new_doc is None:
            self.new_doc = [True] * len(self.texts)
        if self.new_doc is not None:
            self.new_doc += seg.new_doc if seg.new_doc is not None else [True] * len(seg.texts)
        self.texts += seg.texts
        self.nbytes += seg.nbytes


def batches(inputs, field, split, piece_bytes, batch_bytes):
    """Batches of about batch_bytes of text each."""
    batch = Batch()
    for inp in inputs:
        segs = (text_segments(inp, split, piece_bytes) if inp.kind == "text"
                else jsonl_segments(inp, field, split, piece_bytes))
        for seg in segs:
            batch.add(seg)
            if batch.nbytes >= batch_bytes:
                yield batch
                batch = Batch()
    if batch.texts:
        yield batch


# ---- the command -----------------------------------------------------------------------------

def _parse_fraction(s):
    try:
        f = Fraction(s.strip())
    except (ValueError, ZeroDivisionError):
        raise UserError(f"--val-fraction {s!r}: not a number (give 0 < F < 1, e.g. 0.01)") from None
    if not 0 < f < 1:
        raise UserError(f"--val-fraction {s}: must be between 0 and 1, exclusive (e.g. 0.01)")
    return f


def _default_val_path(out):
    root, ext = os.path.splitext(out)
    return f"{root}_val{ext}"


def _cpu_count():
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _same_file(a, b):
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def run(argv):
    global PROGRESS
    t_start = time.monotonic()
    if not argv or argv[0] in ("-h", "--help"):
        if argv:
            build_parser().print_help()
            output.send_result({"files": [], "message": ""})
            return 0
        raise UserError("usage: bigc data encode INPUT... --tokenizer PATH -o OUT.bin (see --help)")
    if argv[0] != "encode":
        raise UserError(f"unknown command {argv[0]!r}: the only one is `encode` (bigc data encode --help)")
    parser = build_parser()
    args = parser.parse_intermixed_args(argv[1:])
    if args.help:
        parser.print_help()
        output.send_result({"files": [], "message": ""})
        return 0
    output.check_driver_env()

    # -- the command line, and the output paths, before anything big is read
    if not args.inputs:
        raise UserError("no INPUT files given (bigc data encode INPUT... --tokenizer PATH -o OUT.bin)")
    if not args.tokenizer:
        raise UserError("--tokenizer PATH is required (a tokenizer.json, or a Hugging Face model directory)")
    if not args.output:
        raise UserError("-o OUT.bin is required (the token file to write)")
    fraction = _parse_fraction(args.val_fraction) if args.val_fraction is not None else None
    if args.val_output is not None and fraction is None:
        raise UserError("--val-output needs --val-fraction F (the share of the tokens to put there)")
    if args.threads is not None:
        try:
            threads = int(args.threads)
        except ValueError:
            threads = 0
        if threads < 1:
            raise UserError(f"--threads {args.threads}: give a whole number >= 1")
    elif os.environ.get("RAYON_NUM_THREADS", "").isdigit() and int(os.environ["RAYON_NUM_THREADS"]) > 0:
        threads = int(os.environ["RAYON_NUM_THREADS"])
    else:
        threads = _cpu_count()
    out_final = output.check_output_path(args.output, "-o")
    val_display = None
    val_final = None
    if fraction is not None:
        val_display = args.val_output if args.val_output is not None else _default_val_path(args.output)
        val_final = output.check_output_path(val_display, "--val-output")
        if val_final == out_final:
            raise UserError(f"--val-output {val_display}: the same file as -o {args.output}")
    inputs = check_inputs(args.inputs, args.format)
    for inp in inputs:
        for final, display in ((out_final, args.output), (val_final, val_display)):
            if final and (_same_file(inp.path, final) or os.path.abspath(inp.path) == final):
                raise UserError(f"{display}: also an input; write the tokens to another file")
    if args.text_field is not None and not any(i.kind == "jsonl" for i in inputs):
        raise UserError("--text-field applies to JSON lines inputs (.jsonl/.json, or --format jsonl), "
                        "and none of the inputs is one")
    field = args.text_field if args.text_field is not None else "text"
    total_bytes = sum(i.size for i in inputs)

    # -- the tokenizer (tokenizers reads RAYON_NUM_THREADS when it is first imported)
    os.environ["RAYON_NUM_THREADS"] = str(threads)
    os.environ["TOKENIZERS_PARALLELISM"] = "true" if threads > 1 else "false"
    import numpy as np
    from . import tok
    info = tok.load(args.tokenizer)
    sep = tok.separator(info, args.separator)
    layout = output.layout_for_vocab(info.vocab_size)
    dtype = output.LAYOUTS[layout][2]
    tokenizer = info.tokenizer
    encode_batch = getattr(tokenizer, "encode_batch_fast", None) or tokenizer.encode_batch

    # Pieces of a large document: about 8 KiB each. Small pieces are not only parallel: the
    # tokenizers library is faster per byte on short texts (GPT-2's on one thread: 2.6 MB/s on 4 KiB
    # pieces, 2.2 MB/s on 256 KiB, 1 MB/s on a whole 16 MB document).
    env_piece = os.environ.get("BIGC_DATA_PIECE_BYTES")  # for tests and measurements
    piece_bytes = max(int(env_piece), 64) if env_piece else 8 << 10
    batch_bytes = 2 << 20
    split = info.split_ok
    quiet = args.quiet
    if not quiet and not split:
        big = [i for i in inputs if i.kind == "text" and i.size > (64 << 20)]
        if big:
            print(f"bigc data: note: {big[0].path} is one {big[0].size / 1e6:,.0f} MB document, encoded whole "
                  f"on one thread: cutting it into pieces is not provably exact for this tokenizer "
                  f"({info.split_reason})", file=sys.stderr)

    progress = PROGRESS = Progress(total_bytes, quiet)
    train = output.TokenFile(output.OutputFile(out_final, args.output), layout, info.vocab_size)
    val = (output.TokenFile(output.OutputFile(val_final, val_display), layout, info.vocab_size)
           if fraction is not None else None)
    limit = output.MAX_TOKENS if fraction is None else int(output.MAX_TOKENS / (1 - fraction)) + 2
    doc_starts = np.zeros(1024, dtype=np.int64)
    state = {"docs": 0, "tokens": 0, "bytes": 0, "pieces": 0, "chars": 0}

    def consume(fut, batch):
        nonlocal doc_starts
        while True:
            try:
                encs = fut.result(timeout=0.2)
                break
            except TimeoutError:
                progress.update(state["bytes"], state["tokens"])
        ids = [e.ids for e in encs]
        del encs
        lengths = np.fromiter(map(len, ids), dtype=np.int64, count=len(ids))
        flat = np.fromiter(chain.from_iterable(ids), dtype=dtype, count=int(lengths.sum()))
        del ids
        new = (np.ones(len(lengths), dtype=bool) if batch.new_doc is None
               else np.array(batch.new_doc, dtype=bool))
        n0 = state["tokens"]
        if sep is None:
            arr = flat
            begins = np.cumsum(lengths) - lengths
        else:
            extra = new.astype(np.int64)
            begins = np.cumsum(lengths + extra) - lengths - extra
            arr = np.empty(flat.size + int(extra.sum()), dtype=dtype)
            keep = np.ones(arr.size, dtype=bool)
            keep[begins[new]] = False
            arr[begins[new]] = sep[1]
            arr[keep] = flat
        starts = begins[new] + n0
        if arr.size and int(arr.max()) >= info.vocab_size:
            raise RuntimeError(f"the tokenizer produced id {int(arr.max())} >= its vocabulary size {info.vocab_size}")
        train.append(arr)
        d = state["docs"]
        if d + starts.size > doc_starts.size:
            doc_starts = np.resize(doc_starts, max(2 * doc_starts.size, d + starts.size))
        doc_starts[d:d + starts.size] = starts
        n = n0 + arr.size
        state["docs"] = d + starts.size
        state["tokens"] = n
        state["bytes"] += batch.nbytes
        state["pieces"] += len(batch.texts)
        state["chars"] += sum(map(len, batch.texts))
        if n > limit:
            raise UserError(f"more than {output.MAX_TOKENS:,} tokens (2^31-1) for {args.output}: llm.c's token "
                            f"files hold at most that; split the input into several runs")
        progress.update(state["bytes"], n)

    from concurrent.futures import ThreadPoolExecutor
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="bigc-encode")
    ok = False
    try:
        train.start()
        pending = deque()
        for batch in batches(inputs, field, split, piece_bytes, batch_bytes):
            pending.append((pool.submit(encode_batch, batch.texts, add_special_tokens=False), batch))
            while len(pending) > 1:
                consume(*pending.popleft())
        while pending:
            consume(*pending.popleft())
        progress.update(state["bytes"], state["tokens"], force=True)

        n = state["tokens"]
        docs = state["docs"]
        if docs == 0:
            raise UserError("no documents in the input (" + ", ".join(i.path for i in inputs) + ")")
        if state["chars"] == 0:
            raise UserError("the input holds no text (" + ", ".join(i.path for i in inputs) + " "
                            + ("is" if len(inputs) == 1 else "are") + " empty)")
        if val is not None:
            cut = (n * (1 - fraction))  # a Fraction: exact
            s = None
            if docs >= 2:
                starts = doc_starts[:docs]
                k = int(np.searchsorted(starts, -(-cut.numerator // cut.denominator), side="left"))
                if k < docs and starts[k] < n:
                    s = int(starts[k])
            if s is None:
                s = -(-cut.numerator // cut.denominator)  # ceil
            if s < 2 or n - s < 2:
                raise UserError(f"--val-fraction {args.val_fraction} leaves {'the training file' if s < 2 else 'the validation file'} "
                                f"with {s if s < 2 else n - s} token(s) of {n:,}: give "
                                f"{'a smaller' if s < 2 else 'a larger'} fraction, or more text")
            val.start()
            train.copy_tail_to(val, s)
            train.truncate(s)
            val.finalize()
        train.finalize()
        train.out.commit()
        if val is not None:
            val.out.commit()
        ok = True
    finally:
        if not ok:
            pool.shutdown(wait=False, cancel_futures=True)
            train.out.discard()
            if val is not None:
                val.out.discard()
    pool.shutdown(wait=True)
    progress.clear()

    secs = time.monotonic() - t_start
    sep_text = f"each after {sep[0]} ({sep[1]})" if sep is not None else "no separator"
    msg = (f"bigc data: wrote {train.count:,} tokens ({layout}, vocabulary {info.vocab_size:,}) to {args.output} "
           f"in {secs:.1f} s ({total_bytes / 1e6 / max(secs, 1e-9):.1f} MB/s)")
    if val is not None:
        msg += f"; validation: {val.count:,} tokens to {val_display}"
    msg += f"; {state['docs']:,} document{'s' if state['docs'] != 1 else ''}, {sep_text}"
    if env_piece:
        print(f"bigc data: debug: {state['pieces']} pieces", file=sys.stderr)
    files = [out_final] + ([val_final] if val is not None else [])
    if output.driver_mode():
        output.send_result({"files": files, "message": msg})
    else:
        print(msg)
    return 0
