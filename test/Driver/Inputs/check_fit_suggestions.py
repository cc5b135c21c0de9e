#!/usr/bin/env python3
"""Checks the option sets a `bigc compile` not-fit report lists under "options that would make it
fit:" (one per line, flags then two spaces then the bytes): compiles the model with each (plus the
original options) and fails unless every one compiles (exit 0) and fits. At least one is required.

usage: check_fit_suggestions.py REPORT.txt MODEL.mlir OUT.bigc [ORIGINAL OPTIONS...]
"""
import re
import subprocess
import sys

report, model, out, base = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
lines = open(report).read().splitlines()
start = next(i for i, l in enumerate(lines) if l.strip() == "options that would make it fit:")
sets = []
for l in lines[start + 1:]:
    s = l.strip()
    if not s.startswith("--"):
        break
    sets.append(re.split(r"\s{2,}", s)[0].split())
if not sets:
    sys.exit("no option set listed as fitting in " + report)


def override(base, flags):
    """The original options with the suggested flags replacing those of the same name."""
    names = {f for f in flags if f.startswith("--")}
    out, i = [], 0
    while i < len(base):
        if base[i] in names:
            i += 2
            continue
        out.append(base[i])
        i += 1
    return out + flags


for flags in sets:
    cmd = ["bigc", "compile", model, "-o", out, "--quiet"] + override(base, flags)
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if r.returncode != 0:
        sys.exit("suggested option set %s does not compile/fit: %s\n%s" % (" ".join(flags), " ".join(cmd), r.stderr))
print("%d suggested option sets fit" % len(sets))
