"""Summarise one measurement over repeated ojsd-bench runs (used by bench/run.sh).

    summary.py DIR NAME RUNS EXPR [median]

EXPR is a Python expression over `d`, the JSON object of DIR/NAME-<i>.json. Prints the
value when RUNS is 1; otherwise "median (min–max)" for numbers, or the values joined by
"/" when they are not numbers (e.g. the exactly-once verdicts). With `median`, prints the
median alone (for the target verdict).
"""
import json
import statistics
import sys

folder, name, runs, expr = sys.argv[1:5]
only_median = len(sys.argv) > 5 and sys.argv[5] == "median"
values = []
for i in range(1, int(runs) + 1):
    with open(f"{folder}/{name}-{i}.json") as f:
        d = json.load(f)
    values.append(eval(expr, {"d": d, "round": round}))

numbers = [v for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)]
if len(numbers) != len(values):
    print("/".join(str(v) for v in values))
elif only_median or len(values) == 1:
    m = statistics.median(values)
    print(round(m, 3) if isinstance(m, float) else m)
else:
    m = statistics.median(values)
    m = round(m, 3) if isinstance(m, float) else m
    print(f"{m} ({min(values)}–{max(values)})")
