"""The user's Hugging Face tokenizer: loading it, the document separator, and whether a large
document may be cut into pieces that encode to exactly the tokens of the whole.

Import this module only after RAYON_NUM_THREADS is set (``tokenizers`` reads it once).
"""

import json
import os
import re

from .errors import UserError

EXPECTED = "expected a Hugging Face tokenizer.json, or a model directory holding one"
BOS_CANDIDATES = ("<|begin_of_text|>", "<s>", "<bos>")
EOS_CANDIDATES = ("<|endoftext|>", "<|end_of_text|>", "</s>", "<eos>")

# Pre-tokenizer regexes for which cutting a document right after a '\n' that sits between two
# ASCII graphic characters (see SPLIT_POINT) provably leaves the pre-tokenization, and so the
# tokens, unchanged: GPT-2's (used by ByteLevel with use_regex), and the Split patterns of LLaMA-3
# (also tiktoken's cl100k) and Qwen2. In all three a match that holds a '\n' ends at the '\n' when
# the next character is not whitespace (no alternative continues past a newline into a
# non-whitespace character), no match starts before the '\n' and spans it from a non-whitespace
# character, there is no look-behind, and the only look-ahead, `(?!\S)`, changes its answer at the
# cut only for a whitespace run ending there -- here the lone '\n', which every pattern takes as
# one pre-token either way.
GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
SAFE_SPLIT_PATTERNS = {
    GPT2_PATTERN,
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""",
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""",
}
# A cut point: right after a '\n' whose neighbours are both ASCII graphic characters ('!'..'~').
# (Non-ASCII neighbours are never cut at: which of them count as whitespace differs between
# Unicode versions and regex engines.)
SPLIT_POINT_BYTES = re.compile(rb"[\x21-\x7e]\n(?=[\x21-\x7e])")
SPLIT_POINT_STR = re.compile(r"[\x21-\x7e]\n(?=[\x21-\x7e])")


class TokenizerInfo:
    """A loaded tokenizer and what `bigc data encode` needs to know about it."""

    def __init__(self, tokenizer, json_path, config, config_path, spec):
        self.tokenizer = tokenizer
        self.path = json_path
        self.config = config
        self.config_path = config_path
        self.spec = spec  # the tokenizer.json as a dict
        # header[3]: the vocabulary size. get_vocab_size(with_added_tokens=True), raised to the
        # largest id + 1 should the ids have gaps, so that every token is below it.
        size = tokenizer.get_vocab_size(with_added_tokens=True)
        vocab = tokenizer.get_vocab(with_added_tokens=True)
        self.vocab_size = max(size, max(vocab.values(), default=-1) + 1)
        self.split_ok, self.split_reason = _split_safety(spec)


def _first_line(msg):
    msg = str(msg).strip()
    return msg.splitlines()[0] if msg else "no reason given"


def _read_json(path, what):
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as e:
        raise UserError(f"{path}: cannot read the {what}: {e.strerror or e}") from None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise UserError(f"{path}: not a {what} (not UTF-8 text: byte offset {e.start})") from None
    try:
        return text, json.loads(text)
    except ValueError as e:
        detail = f"{e.msg} at line {e.lineno} column {e.colno}" if hasattr(e, "lineno") else str(e)
        raise UserError(f"{path}: not a {what} (not JSON: {detail})") from None


def load(path):
    """Load --tokenizer PATH: a tokenizer.json, or a directory holding one (and, when present,
    tokenizer_config.json beside it, for bos_token/eos_token)."""
    from tokenizers import Tokenizer

    if not os.path.exists(path):
        raise UserError(f"--tokenizer {path}: no such file or directory ({EXPECTED})")
    if os.path.isdir(path):
        json_path = os.path.join(path, "tokenizer.json")
        if not os.path.isfile(json_path):
            have = set(os.listdir(path))
            hint = ""
            if "tokenizer.model" in have or {"vocab.json", "merges.txt"} <= have:
                hint = ("; it holds a slow tokenizer's files: write tokenizer.json with transformers' "
                        "AutoTokenizer.from_pretrained(DIR).save_pretrained(DIR)")
            raise UserError(f"--tokenizer {path}: a directory without tokenizer.json ({EXPECTED}){hint}")
    else:
        json_path = path
    config_path = os.path.join(os.path.dirname(os.path.abspath(json_path)), "tokenizer_config.json")
    if not os.path.isfile(config_path) or (not os.path.isdir(path) and os.path.basename(path) != "tokenizer.json"):
        config_path = None

    # A cheap look at the start first: a corpus passed as the tokenizer fails here, unread.
    try:
        with open(json_path, "rb") as f:
            head = f.read(256)
    except OSError as e:
        raise UserError(f"--tokenizer {json_path}: cannot read it: {e.strerror or e}") from None
    if not head.lstrip(b"\xef\xbb\xbf \t\r\n").startswith(b"{"):
        raise UserError(f"--tokenizer {json_path}: not a tokenizer.json (not a JSON object; {EXPECTED})")
    text, spec = _read_json(json_path, "tokenizer.json")
    if not isinstance(spec, dict) or "model" not in spec:
        raise UserError(f"--tokenizer {json_path}: JSON but not a tokenizer.json (no \"model\"; {EXPECTED})")
    try:
        tokenizer = Tokenizer.from_str(text)
    except Exception as e:  # tokenizers raises plain Exception with serde's message
        raise UserError(f"--tokenizer {json_path}: the tokenizers library cannot load it as a "
                        f"tokenizer.json: {_first_line(e)}") from None
    # The file may carry truncation/padding settings (a tokenizer saved after enable_truncation):
    # they would cut every document to max_length tokens.
    tokenizer.no_truncation()
    tokenizer.no_padding()

    config = {}
    if config_path:
        _, config = _read_json(config_path, "tokenizer_config.json")
        if not isinstance(config, dict):
            raise UserError(f"{config_path}: not a tokenizer_config.json (not a JSON object)")
    return TokenizerInfo(tokenizer, json_path, config, config_path, spec)


def _config_token(info, key):
    v = info.config.get(key)
    if isinstance(v, dict):
        v = v.get("content")
    if not isinstance(v, str) or not v:
        return None
    tid = info.tokenizer.token_to_id(v)
    if tid is None:
        raise UserError(f"{info.config_path}: {key} {v!r} is not in the tokenizer's vocabulary "
                        f"({info.path}); name the separator with --separator TOKEN")
    return v, tid


def separator(info, spec):
    """The document separator for --separator SPEC: (token, id), or None for `none`."""
    tok = info.tokenizer
    if spec == "none":
        return None
    if spec != "auto":
        tid = tok.token_to_id(spec)
        if tid is None:
            specials = sorted(t.content for t in tok.get_added_tokens_decoder().values() if t.special)
            hint = f" (its special tokens: {', '.join(specials[:8])}{', ...' if len(specials) > 8 else ''})" if specials else ""
            raise UserError(f"--separator {spec!r}: not a token of the tokenizer {info.path}{hint}")
        return spec, tid
    special = {t.content: i for i, t in tok.get_added_tokens_decoder().items() if t.special}
    found = _config_token(info, "bos_token")
    if found is None:
        found = next(((c, special[c]) for c in BOS_CANDIDATES if c in special), None)
    if found is None:
        found = _config_token(info, "eos_token")
    if found is None:
        found = next(((c, special[c]) for c in EOS_CANDIDATES if c in special), None)
    if found is None:
        raise UserError(f"the tokenizer {info.path} has no BOS or end-of-text token to put before each "
                        f"document: name one with --separator TOKEN, or use --separator none")
    return found


def _split_safety(spec):
    """(True, '') when a document may be cut at SPLIT_POINT (see SAFE_SPLIT_PATTERNS), else
    (False, why not)."""
    if spec.get("normalizer") is not None:
        return False, "the tokenizer has a normalizer"
    pt = spec.get("pre_tokenizer")
    if not isinstance(pt, dict):
        return False, "the tokenizer has no pre-tokenizer"
    members = pt.get("pretokenizers") if pt.get("type") == "Sequence" else [pt]
    if not isinstance(members, list) or not members:
        return False, "the tokenizer's pre-tokenizer is an empty Sequence"
    splits = False
    has_byte_level = False
    for m in members:
        kind = m.get("type") if isinstance(m, dict) else None
        if kind == "ByteLevel":
            has_byte_level = True
            if m.get("add_prefix_space", True):
                return False, "its ByteLevel pre-tokenizer adds a prefix space"
            if m.get("use_regex", True):
                splits = True
        elif kind == "Split":
            pattern = m.get("pattern") or {}
            if (pattern.get("Regex") in SAFE_SPLIT_PATTERNS and m.get("behavior") == "Isolated"
                    and not m.get("invert", False)):
                splits = True
            else:
                return False, "its Split pre-tokenizer's pattern is not one known to allow it"
        else:
            return False, f"its pre-tokenizer {kind} is not ByteLevel"
    if not has_byte_level:
        return False, "its pre-tokenizer is not ByteLevel"
    if not splits:
        return False, "its ByteLevel pre-tokenizer does not split words (use_regex false)"
    for t in spec.get("added_tokens") or []:
        content = t.get("content", "")
        if t.get("lstrip") or any(c.isspace() for c in content):
            return False, f"its added token {content!r} strips or holds whitespace"
    return True, ""


def split_points_str(text, piece_chars):
    """Cut a document (str) into pieces of about piece_chars at SPLIT_POINT_STR."""
    pieces = []
    start = 0
    n = len(text)
    while n - start > piece_chars * 3 // 2:
        m = SPLIT_POINT_STR.search(text, start + piece_chars)
        if m is None:
            break
        pieces.append(text[start:m.end()])
        start = m.end()
    pieces.append(text[start:])
    return pieces
