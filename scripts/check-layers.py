#!/usr/bin/env python3
"""The layers of the tree include each other one way (make test: layers.check).

    tools -> driver -> passes -> dialect -> format / support
    runtime -> inspect -> format / support

Each source and header belongs to a layer by its folder; each `#include "bigc/<Folder>/..."`
names the layer of the header it reaches. A layer may include its own headers and those of the
layers below it (ALLOWED); anything else is listed, with the file and line, and the exit status is 1.
The compiler's libraries (driver and below) never reach the runtime: they link the format library,
not the runtime's (checked from CMake too: bigc_driver's link line). Namespaces follow the layers:
the format's code is in bigc::format, and nothing outside the runtime and the tools names bigc::rt
(the runtime sees the format's names through include/bigc/Runtime/format.h).
"""
import os
import re
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))

# Folder of a file -> its layer.
FOLDERS = [
    ("include/bigc/Support/", "support"), ("include/bigc/Format/", "format"), ("format/", "format"),
    ("include/bigc/Inspect/", "inspect"), ("inspect/", "inspect"),
    ("include/bigc/Runtime/", "runtime"), ("runtime/", "runtime"),
    ("include/bigc/Plan/", "plan"), ("lib/plan/", "plan"),
    ("include/bigc/Dialect/", "dialect"), ("dialects/", "dialect"),
    ("include/bigc/Analysis/", "analysis"), ("lib/analysis/", "analysis"),
    ("include/bigc/Passes/", "passes"), ("passes/", "passes"),
    ("include/bigc/Emit/", "emit"), ("lib/emit/", "emit"),
    ("include/bigc/Gen/", "gen"), ("lib/gen/", "gen"),
    ("lib/hardware/", "support"),
    ("include/bigc/Driver/", "driver"), ("driver/", "driver"),
    ("tools/", "tools"),
]
# Header folder (bigc/<Folder>/) -> layer.
HEADERS = {"Support": "support", "Format": "format", "Inspect": "inspect", "Runtime": "runtime", "Plan": "plan",
           "Dialect": "dialect", "Analysis": "analysis", "Passes": "passes", "Emit": "emit", "Gen": "gen",
           "Driver": "driver"}
BELOW = {
    "support": [],
    "format": ["support"],
    "inspect": ["format", "support"],
    "runtime": ["inspect", "format", "support"],
    "plan": ["format", "support"],
    "dialect": ["format", "support"],
    "analysis": ["dialect", "plan", "format", "support"],
    "passes": ["analysis", "dialect", "plan", "format", "support"],
    "emit": ["analysis", "dialect", "format", "support"],
    "gen": ["support"],
    "driver": ["passes", "emit", "analysis", "dialect", "plan", "gen", "inspect", "format", "support"],
    "tools": ["driver", "runtime", "passes", "emit", "analysis", "dialect", "plan", "gen", "inspect", "format",
              "support"],
}


def layer_of(rel):
    for prefix, layer in FOLDERS:
        if rel.startswith(prefix):
            return layer
    return None


def main():
    bad = []
    files = 0
    for top in ("include", "format", "inspect", "runtime", "lib", "dialects", "passes", "driver", "tools"):
        for dirpath, _, names in os.walk(os.path.join(ROOT, top)):
            for n in names:
                if not n.endswith((".cpp", ".h", ".cu", ".cuh", ".inc")):
                    continue
                path = os.path.join(dirpath, n)
                rel = os.path.relpath(path, ROOT)
                layer = layer_of(rel)
                if layer is None:
                    bad.append(f"{rel}: in no layer (add its folder to scripts/check-layers.py)")
                    continue
                files += 1
                for i, line in enumerate(open(path, encoding="utf-8", errors="replace"), 1):
                    code = line.split("//", 1)[0]
                    if layer == "format" and re.search(r"\bnamespace\s+bigc::rt\b", code):
                        bad.append(f"{rel}:{i}: the format layer declares names in bigc::rt (its namespace is "
                                   "bigc::format)")
                    if layer not in ("runtime", "tools") and re.search(r"(?<![\w:])(bigc::)?rt::", code):
                        bad.append(f"{rel}:{i}: the {layer} layer names the runtime's namespace ({line.strip()})")
                    m = re.match(r'\s*#\s*include\s+"bigc/([A-Za-z]+)/', line)
                    if not m:
                        continue
                    target = HEADERS.get(m.group(1))
                    if target is None:
                        bad.append(f"{rel}:{i}: bigc/{m.group(1)}/ is in no layer")
                    elif target != layer and target not in BELOW[layer]:
                        bad.append(f"{rel}:{i}: the {layer} layer includes the {target} layer ({line.strip()})")
    cm = open(os.path.join(ROOT, "driver", "CMakeLists.txt")).read()
    if re.search(r"target_link_libraries\(bigc_driver[^)]*bigc_runtime", cm):
        bad.append("driver/CMakeLists.txt: bigc_driver links bigc_runtime (the compiler must not link the runtime)")
    for b in bad:
        print(b)
    print(f"check-layers: {files} files, {len(bad)} problems" +
          ("" if not bad else " (the layers: scripts/check-layers.py)"))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
