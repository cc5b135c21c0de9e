"""bigc compile --auto's report (stdin): the chosen plan (the row marked *) is the fastest of the
plans compiled whole, each row's options carry every flag in argv[1:] (a pinned dimension), and
the chosen command line names the same options as the chosen row. Prints the chosen command."""
import re
import sys

text = sys.stdin.read()
rows = re.findall(r"^\s+(\*|\d+)\s+([\d.]+) (us|ms|s)\s+\S+ \S+\s+\S+\s+(--ranks .*)$", text, re.M)
assert rows, "no plans in the report:\n" + text
scale = {"us": 1e-6, "ms": 1e-3, "s": 1.0}
steps = [float(v) * scale[u] for _, v, u, _ in rows]
assert rows[0][0] == "*", rows[0]
assert steps[0] == min(steps), f"the chosen plan ({steps[0]}) is not the fastest of {steps}"
for flag in sys.argv[1:]:
    for r in rows:
        assert flag in r[3], f"pinned {flag} missing from {r[3]}"
chosen = re.search(r"^  chosen: (bigc compile .*)$", text, re.M)
assert chosen, "no chosen command"
assert chosen.group(1).endswith(rows[0][3].strip()), (chosen.group(1), rows[0][3])
print(chosen.group(1))
