"""bigc data encode against the tokenizers library's own encode_batch (bench/tokenize/run.sh).

(a) `python -m bigc_data encode` end to end (a new process: start-up, tokenizer load, reading,
    encoding, writing the token file), wall time;
(b) Tokenizer.encode_batch(documents, add_special_tokens=False) of the same documents in one call,
    in a process with the same RAYON_NUM_THREADS, timing only that call (the file is read and the
    tokenizer loaded before the clock starts).
Both as MB/s of input text; the faster of --reps runs each, the runs interleaved. Also the CPU
seconds (user + system, all threads) of each, less sensitive than the wall time to other work on
the machine: MB per CPU second.
"""

import argparse
import json
import os
import resource
import subprocess
import sys
import time

REF = r"""
import json, sys, time
from tokenizers import Tokenizer
tok_path, corpus, kind = sys.argv[1:4]
tok = Tokenizer.from_file(tok_path)
tok.no_truncation(); tok.no_padding()
if kind == "jsonl":
    docs = [json.loads(l)["text"] for l in open(corpus, encoding="utf-8") if l.strip()]
else:
    docs = [open(corpus, encoding="utf-8").read()]
t0, c0 = time.perf_counter(), time.process_time()
encs = tok.encode_batch(docs, add_special_tokens=False)
t1, c1 = time.perf_counter(), time.process_time()
print(json.dumps({"secs": t1 - t0, "cpu": c1 - c0, "tokens": sum(len(e.ids) for e in encs) + len(docs)}))
"""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--corpus", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    ap.add_argument("--target-mb", type=float, default=32.0, help="repeat the corpus to about this size")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--python", default=sys.executable)
    args = ap.parse_args()
    root = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
    text = open(args.corpus, encoding="utf-8").read()
    size = len(text.encode("utf-8"))
    repeat = max(1, round(args.target_mb * 1e6 / size))
    big = text * repeat
    txt = os.path.join(args.work, "corpus.txt")
    with open(txt, "w", encoding="utf-8") as f:
        f.write(big)
    # The same text as JSON lines: one document per paragraph (split at blank lines).
    jl = os.path.join(args.work, "corpus.jsonl")
    paras = [p for p in big.split("\n\n") if p]
    with open(jl, "w", encoding="utf-8") as f:
        for p in paras:
            f.write(json.dumps({"text": p}) + "\n")
    env = dict(os.environ, RAYON_NUM_THREADS=str(args.threads), PYTHONPATH=os.path.join(root, "python"))
    print(f"tokenizer {args.tokenizer} ({os.path.getsize(args.tokenizer):,} bytes)")
    print(f"corpus {args.corpus} ({size:,} bytes) x {repeat} = {len(big.encode('utf-8')) / 1e6:.1f} MB; "
          f"threads {args.threads}; best of {args.reps}")
    for kind, path, what in (("text", txt, "one plain text document"),
                             ("jsonl", jl, f"JSON lines, {len(paras):,} documents")):
        nbytes = os.path.getsize(path)
        text_mb = (len(big.encode("utf-8")) if kind == "text" else sum(len(p.encode("utf-8")) for p in paras)) / 1e6
        ours, theirs, ours_cpu, theirs_cpu = [], [], [], []
        for _ in range(args.reps):
            out = os.path.join(args.work, "out.bin")
            r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
            t0 = time.perf_counter()
            subprocess.run([args.python, "-m", "bigc_data", "encode", path, "--tokenizer", args.tokenizer,
                            "-o", out, "--threads", str(args.threads), "--quiet"], env=env, check=True,
                           stdout=subprocess.DEVNULL)
            ours.append(time.perf_counter() - t0)
            r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
            ours_cpu.append(r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime)
            r = subprocess.run([args.python, "-c", REF, args.tokenizer, path, kind], env=env, check=True,
                               capture_output=True, text=True)
            res = json.loads(r.stdout)
            theirs.append(res["secs"])
            theirs_cpu.append(res["cpu"])
        width = 2 if _vocab(args.tokenizer) <= 65536 else 4
        n_tokens = (os.path.getsize(out) - 1024) // width
        a, b = text_mb / min(ours), text_mb / min(theirs)
        ac, bc = text_mb / min(ours_cpu), text_mb / min(theirs_cpu)
        print(f"== {kind}: {what} ({text_mb:.1f} MB of text, file {nbytes / 1e6:.1f} MB)")
        print(f"  (a) bigc data encode, end to end : {min(ours):6.2f} s {a:6.2f} MB/s | {min(ours_cpu):6.2f} CPU s "
              f"{ac:5.2f} MB/CPU s  ({n_tokens:,} tokens)")
        print(f"  (b) tokenizers encode_batch      : {min(theirs):6.2f} s {b:6.2f} MB/s | {min(theirs_cpu):6.2f} CPU s "
              f"{bc:5.2f} MB/CPU s  ({res['tokens']:,} tokens, with one separator per document)")
        print(f"  ratio (a)/(b): {a / b:.2f} by wall time, {ac / bc:.2f} by CPU time  (target >= 0.80)")


def _vocab(path):
    from tokenizers import Tokenizer
    return Tokenizer.from_file(path).get_vocab_size(with_added_tokens=True)


if __name__ == "__main__":
    main()
