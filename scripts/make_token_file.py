#!/usr/bin/env python3
"""Writes an llm.c token file (what delta's token dataset,
delta_dataset_tokens_new, and llm.c's DataLoader read; docs/API.md, "Data"):
a header of 256 little-endian int32
(magic 20240520, version 1, token count, zeros), then the tokens as
little-endian uint16.

The tokens come from one of:
  --ids "15496 11 995"     ids given on the command line (spaces or commas)
  --ids-file FILE          ids in a text file (spaces, commas or newlines; - for stdin)
  --bytes FILE             the file's bytes as ids 0..255 (no tokenizer needed)
  --text FILE --tiktoken gpt2
                           text encoded by tiktoken (pip install tiktoken)
  --text FILE --hf-tokenizer tokenizer.json
                           text encoded by a Hugging Face tokenizer.json
                           (pip install tokenizers)
--eot ID puts ID (GPT-2's <|endoftext|> is 50256) before the tokens, as
llm.c's data scripts do before each document. --vocab N refuses an id >= N.
--read FILE prints a token file's header and first tokens instead.

Only the Python standard library is needed, but for the tokenizers. The file
is written atomically (a temporary beside it, then a rename), and only a
regular file is ever replaced.
"""
import argparse
import array
import os
import stat
import struct
import sys
import tempfile

MAGIC = 20240520
VERSION = 1
HEADER_INTS = 256


def parse_ids(text):
    ids = []
    for word in text.replace(",", " ").split():
        try:
            ids.append(int(word))
        except ValueError:
            sys.exit(f"make_token_file: '{word}' is not a token id")
    return ids


def encode_text(path, args):
    if not args.tiktoken and not args.hf_tokenizer:
        sys.exit("make_token_file: --text needs --tiktoken ENCODING or "
                 "--hf-tokenizer tokenizer.json (or use --bytes FILE)")
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except UnicodeDecodeError as e:
        sys.exit(f"make_token_file: {path} is not UTF-8 text ({e}); use "
                 f"--bytes for a file of bytes")
    if args.tiktoken:
        try:
            import tiktoken
        except ImportError:
            sys.exit("make_token_file: --tiktoken needs the tiktoken package "
                     "(pip install tiktoken)")
        enc = tiktoken.get_encoding(args.tiktoken)
        return enc.encode_ordinary(text)
    if args.hf_tokenizer:
        try:
            from tokenizers import Tokenizer
        except ImportError:
            sys.exit("make_token_file: --hf-tokenizer needs the tokenizers "
                     "package (pip install tokenizers)")
        return Tokenizer.from_file(args.hf_tokenizer).encode(text).ids


def token_bytes(ids, vocab):
    for i, t in enumerate(ids):
        if not 0 <= t <= 65535:
            sys.exit(f"make_token_file: token {i} is {t}, outside the "
                     f"0..65535 of a uint16 token file; nothing written")
        if vocab and t >= vocab:
            sys.exit(f"make_token_file: token {i} is {t}, not below "
                     f"--vocab {vocab}; nothing written")
    if not 1 <= len(ids) <= 2**31 - 1:
        sys.exit(f"make_token_file: {len(ids)} tokens, expected 1..2^31-1")
    header = [0] * HEADER_INTS
    header[0:3] = [MAGIC, VERSION, len(ids)]
    body = array.array("H", ids)
    if sys.byteorder != "little":
        body.byteswap()
    return struct.pack(f"<{HEADER_INTS}i", *header) + body.tobytes()


def write_atomic(path, data):
    try:
        st = os.stat(path)
        if not stat.S_ISREG(st.st_mode):
            sys.exit(f"make_token_file: {path} is not a regular file; give "
                     f"another path")
        mode = stat.S_IMODE(st.st_mode)
    except FileNotFoundError:
        mode = None
    target = os.path.realpath(path)
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(target) or ".",
                               prefix=os.path.basename(target) + ".",
                               suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        if mode is None:
            umask = os.umask(0o22)
            os.umask(umask)
            mode = 0o666 & ~umask
        os.chmod(tmp, mode)
        os.replace(tmp, target)
    except BaseException:
        os.unlink(tmp)
        raise


def read(path):
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 4 * HEADER_INTS:
        sys.exit(f"{path}: {len(data)} bytes, shorter than the header")
    magic, version, n = struct.unpack_from("<3i", data)
    print(f"{path}: magic {magic}{'' if magic == MAGIC else ' (bad)'}, "
          f"version {version}, {n} tokens, {len(data)} bytes "
          f"(expected {4 * HEADER_INTS + 2 * n})")
    body = array.array("H", data[4 * HEADER_INTS:4 * HEADER_INTS + 2 * 20])
    if sys.byteorder != "little":
        body.byteswap()
    print("first tokens:", " ".join(map(str, body)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--ids", help="token ids, separated by spaces or commas")
    src.add_argument("--ids-file", help="a file of token ids (- for stdin)")
    src.add_argument("--bytes", help="a file whose bytes are the ids")
    src.add_argument("--text", help="a UTF-8 text file to tokenize")
    src.add_argument("--read", help="print a token file's header and first "
                     "tokens")
    ap.add_argument("--tiktoken", help="tiktoken encoding for --text (gpt2)")
    ap.add_argument("--hf-tokenizer", help="tokenizer.json for --text")
    ap.add_argument("--eot", type=int, help="an id put before the tokens "
                    "(GPT-2's <|endoftext|>: 50256)")
    ap.add_argument("--vocab", type=int, default=0,
                    help="refuse ids at or above it (GPT-2: 50257)")
    ap.add_argument("-o", "--out", help="the token file to write")
    args = ap.parse_args()
    if args.read:
        read(args.read)
        return
    if not args.out:
        ap.error("-o/--out is required")
    if args.ids is not None:
        ids = parse_ids(args.ids)
    elif args.ids_file:
        if args.ids_file == "-":
            ids = parse_ids(sys.stdin.read())
        else:
            with open(args.ids_file) as f:
                ids = parse_ids(f.read())
    elif args.bytes:
        with open(args.bytes, "rb") as f:
            ids = list(f.read())
    else:
        ids = list(encode_text(args.text, args))
    if args.eot is not None:
        ids = [args.eot] + ids
    write_atomic(args.out, token_bytes(ids, args.vocab))
    print(f"wrote {args.out}: {len(ids)} tokens")


if __name__ == "__main__":
    main()
