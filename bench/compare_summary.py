#!/usr/bin/env python3
"""The tables bench/compare.sh prints: throughput per setting, pickup latency at fixed
offered rates, and each target as met / NOT met, over RUNS repetitions (min–max).

Input: a TSV of `run setting system durability concurrency json-path slow-iterations`.
Ratios are taken within one run (ojsd and the peer measured minutes apart), then ranged.
"""
import json
import sys
from collections import OrderedDict

OJSD, FAKTORY = "ojsd", "ojsd faktory port"


def load(path):
    try:
        with open(path) as f:
            text = f.read().strip()
        return json.loads(text.splitlines()[-1]) if text else None
    except (OSError, ValueError, IndexError):
        return None


rows = []
for line in open(sys.argv[1]):
    if not line.strip():
        continue
    run, setting, system, dur, conc, path, slow = line.rstrip("\n").split("\t")
    rows.append(
        {
            "run": int(run),
            "setting": setting,
            "system": system,
            "dur": dur,
            "conc": conc,
            "d": load(path),
            "slow": None if slow == "-" else int(slow),
        }
    )
runs = sorted({r["run"] for r in rows})

groups = OrderedDict()
for r in rows:
    groups.setdefault((r["setting"], r["system"], r["dur"], r["conc"]), []).append(r)


def get(r, f):
    d = r["d"]
    if d is None:
        return None
    try:
        return f(d)
    except (KeyError, TypeError):
        return None


def rng(vals, fmt):
    vals = [v for v in vals if v is not None]
    if not vals:
        return "failed"
    lo, hi = min(vals), max(vals)
    return fmt(lo) if fmt(lo) == fmt(hi) else f"{fmt(lo)}–{fmt(hi)}"


rate = lambda v: f"{v:,.0f}"
ms = lambda v: f"{v:.3g}" if v < 100 else f"{v:,.0f}"
ratio = lambda v: f"{v:.2f}x"
count = lambda v: f"{v:d}"


def jobs_per_s(setting, system, dur=None, run=None):
    for r in rows:
        if r["setting"] == setting and r["system"] == system and r["run"] == run:
            if dur is None or r["dur"] == dur:
                return get(r, lambda d: d["jobs_per_s"])
    return None


def exactly_once(rs):
    oks = [get(r, lambda d: d["exactly_once"]["ok"]) for r in rs]
    if all(o is True for o in oks):
        return "yes"
    return f"NO ({sum(1 for o in oks if o is not True)}/{len(oks)} runs)"


def table(head, out):
    w = [max(len(x[i]) for x in out + [head]) for i in range(len(head))]
    line = lambda x: "| " + " | ".join(c.ljust(w[i]) for i, c in enumerate(x)) + " |"
    print(line(head))
    print("|" + "|".join("-" * (n + 2) for n in w) + "|")
    for x in out:
        print(line(x))
    print()


# --- throughput ----------------------------------------------------------------------
out = []
for (st, sysname, dur, conc), rs in groups.items():
    if st.startswith("latency@"):
        continue
    ratios = []
    for r in rs:
        base = jobs_per_s(st, OJSD, run=r["run"])
        this = get(r, lambda d: d["jobs_per_s"])
        ratios.append(base / this if base and this else None)
    out.append(
        [
            st,
            sysname,
            dur,
            conc,
            rng([get(r, lambda d: d["jobs_per_s"]) for r in rs], rate),
            rng([get(r, lambda d: d["push_per_s"]) for r in rs], rate),
            rng([get(r, lambda d: d["latency_ms"]["p50"]) for r in rs], ms),
            rng([get(r, lambda d: d["latency_ms"]["p99"]) for r in rs], ms),
            exactly_once(rs),
            "-" if sysname == OJSD else rng(ratios, ratio),
            rng([r["slow"] for r in rs], count) if rs[0]["slow"] is not None else "-",
        ]
    )
if out:
    print(f"### Throughput ({len(runs)} run(s); min–max)\n")
    table(
        ["setting", "system", "durability", "concurrency", "jobs/s", "push/s",
         "pickup p50 ms", "p99 ms", "exactly once", "ojsd / this", "slow engine iterations"],
        out,
    )

# --- latency ---------------------------------------------------------------------------
out = []
for (st, sysname, dur, conc), rs in groups.items():
    if not st.startswith("latency@"):
        continue
    out.append(
        [
            st.split("@")[1] + "/s",
            sysname,
            dur,
            rng([get(r, lambda d: d["jobs_per_s"]) for r in rs], rate),
            rng([get(r, lambda d: d["latency_ms"]["p50"]) for r in rs], ms),
            rng([get(r, lambda d: d["latency_ms"]["p90"]) for r in rs], ms),
            rng([get(r, lambda d: d["latency_ms"]["p99"]) for r in rs], ms),
            rng([get(r, lambda d: d["latency_ms"]["max"]) for r in rs], ms),
            rng([get(r, lambda d: d["latency_after_push_reply_ms"]["p50"]) for r in rs], ms),
            rng([get(r, lambda d: d["latency_after_push_reply_ms"]["p99"]) for r in rs], ms),
            exactly_once(rs),
            rng([r["slow"] for r in rs], count) if rs[0]["slow"] is not None else "-",
        ]
    )
if out:
    print(f"### Pickup latency at fixed offered rates ({len(runs)} run(s); min–max; "
          "16 producers x 1 in flight, 16 workers, one job per command)\n")
    table(
        ["offered", "system", "durability", "achieved jobs/s", "p50 ms", "p90 ms", "p99 ms",
         "max ms", "from push reply: p50 ms", "p99 ms", "exactly once",
         "slow engine iterations"],
        out,
    )


# --- targets -----------------------------------------------------------------------------
def verdict(vals, ok):
    vals = [v for v in vals if v is not None]
    if not vals:
        return "no data"
    k = sum(1 for v in vals if ok(v))
    if k == len(vals):
        return "met"
    if k == 0:
        return "NOT met"
    return f"met in {k} of {len(vals)} runs"


lines = []
for port in (OJSD, FAKTORY):
    for st in ("usual", "equal"):
        for peer, target, durs in (("bullmq", 5.0, None), ("list", 1.0, None)):
            for (gst, gsys, gdur, _), rs in groups.items():
                if gst != st or gsys != peer:
                    continue
                vals = []
                for r in rs:
                    a = jobs_per_s(st, port, run=r["run"])
                    b = get(r, lambda d: d["jobs_per_s"])
                    vals.append(a / b if a and b else None)
                why = []
                if st != "usual":
                    why.append("the targets name usual settings")
                if peer == "list" and "always" not in gdur:
                    why.append("this list is not durable")
                note = f" (for reference: {'; '.join(why)})" if why else ""
                lines.append(
                    f"- {port} >= {target:g}x {peer} ({st}, {gdur}): "
                    f"{rng(vals, ratio)} -> **{verdict(vals, lambda v: v >= target)}**{note}"
                )
for port in (OJSD, FAKTORY):
    for (gst, gsys, gdur, gconc), rs in groups.items():
        if gst == "batch" and gsys == port:
            vals = [get(r, lambda d: d["jobs_per_s"]) for r in rs]
            lines.append(
                f"- {port} batch >= 100,000 jobs/s ({gconc}): {rng(vals, rate)} -> "
                f"**{verdict(vals, lambda v: v >= 100_000)}**"
            )
for port in (OJSD, FAKTORY):
    for (gst, gsys, gdur, _), rs in groups.items():
        if not gst.startswith("latency@") or gsys != port:
            continue
        offered = int(gst.split("@")[1])
        for key, how in (("latency_ms", "from send"),
                         ("latency_after_push_reply_ms", "from push reply")):
            vals = [get(r, lambda d: d[key]["p99"]) for r in rs]
            if offered == 5000:
                lines.append(f"- {port} pickup p99 < 2 ms at 5,000/s ({how}): {rng(vals, ms)} ms"
                             f" -> **{verdict(vals, lambda v: v < 2)}**")
            elif offered == 2000:
                lines.append(f"- {port} pickup p99 <= 1 ms at 2,000/s ({how}): {rng(vals, ms)} ms"
                             f" -> **{verdict(vals, lambda v: v <= 1)}**")
if lines:
    print("### Targets\n")
    print("\n".join(lines))
