#!/usr/bin/env python3
"""Run the public OJS conformance suite's JSON cases against an HTTP listener.

A developer tool (stdlib only), not run by CI: it follows the Go runner of
openjobspec/ojs-conformance (runner/http/runner.go, lib/assertions.go and
docs/test-case-reference.md) closely enough to tell which cases pass.

    python3 tests/conformance/run.py SUITE_DIR BASE_URL [--level N] [--test ID] [-v]
"""
import argparse
import json
import math
import os
import re
import sys
import time
import urllib.error
import urllib.request

MEDIA = "application/openjobspec+json"
TEMPLATE = re.compile(r"\{\{steps\.([^.]+)\.response\.body\.([^}]+)\}\}")
UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
UUID7 = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$")
DATETIME = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$")


class Mismatch(Exception):
    pass


def gofmt(v):
    """Go's fmt %v of a decoded JSON value, as contains: and filters compare."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float) and v == int(v) and abs(v) < 1e21:
        return str(int(v))
    if v is None:
        return "<nil>"
    return str(v)


def split_path(path):
    """Dot-separated parts, dots inside [...] kept (lib.splitJSONPath)."""
    return re.findall(r"(?:[^.\[]|\[[^\]]*\])+", path)


def resolve(path, data):
    """lib.ResolveJSONPath: $.a.b[0], [*] wildcards, [?(@.k=='v')] filters."""
    if path.startswith("$."):
        path = path[2:]
    elif path == "$":
        return data
    parts = split_path(path)
    cur = data
    for i, part in enumerate(parts):
        if part == "":
            continue
        if "[" not in part:
            if not isinstance(cur, dict):
                raise Mismatch("expected object at %r" % part)
            if part not in cur:
                return None
            cur = cur[part]
            continue
        field, rest = part[: part.index("[")], part[part.index("[") :]
        if field:
            if not isinstance(cur, dict):
                raise Mismatch("expected object at %r" % field)
            cur = cur.get(field)
        if rest.startswith("[?(@."):
            end = rest.index(")]")
            key, _, want = rest[5:end].partition("==")
            want = want.strip("'\"")
            rest = rest[end + 2 :]
            if not isinstance(cur, list):
                raise Mismatch("expected array for filter at %r" % part)
            cur = next((x for x in cur if isinstance(x, dict) and key in x and gofmt(x[key]) == want), None)
            if rest.startswith(".") and cur is not None:
                return resolve(rest[1:], cur)
            continue
        while rest:
            end = rest.index("]")
            idx, rest = rest[1:end], rest[end + 1 :]
            if not isinstance(cur, list):
                raise Mismatch("expected array at %r" % part)
            if idx == "*":
                tail = ".".join(([rest] if rest else []) + parts[i + 1 :]).lstrip(".")
                out = []
                for item in cur:
                    if not tail:
                        out.append(item)
                        continue
                    try:
                        v = resolve(tail, item)
                    except Mismatch:
                        continue
                    if v is not None:
                        out.append(v)
                return out
            n = int(idx)
            if n < 0 or n >= len(cur):
                raise Mismatch("array index %d out of bounds (length %d) at %r" % (n, len(cur), part))
            cur = cur[n]
    return cur


def is_num(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def match(m, v):
    """lib.MatchAssertion; raises Mismatch."""
    if m is None:
        if v is not None:
            raise Mismatch("expected null, got %r" % (v,))
    elif isinstance(m, str):
        match_str(m, v)
    elif isinstance(m, bool):
        if v is not m:
            raise Mismatch("expected %s, got %r" % (m, v))
    elif is_num(m):
        if not is_num(v) or (float(m) != float(v) and abs(m - v) > 1e-9):
            raise Mismatch("expected %r, got %r" % (m, v))
    elif isinstance(m, list):
        if not isinstance(v, list) or len(v) != len(m):
            raise Mismatch("expected array of length %d, got %r" % (len(m), v))
        for i, (mm, vv) in enumerate(zip(m, v)):
            try:
                match(mm, vv)
            except Mismatch as e:
                raise Mismatch("[%d]: %s" % (i, e))
    elif isinstance(m, dict):
        match_obj(m, v)


def S(v):
    return isinstance(v, str)


def L(v):
    return isinstance(v, list)


# lib.MatchAssertion's string matchers: fixed words, then patterns whose groups are arguments.
FIXED = {
    "any": (lambda v: True, "anything"),
    "absent": (lambda v: v is None, "absent"),
    "exists": (lambda v: v is not None, "field to exist"),
    "string:nonempty": (lambda v: S(v) and v != "", "non-empty string"),
    "string:non_empty": (lambda v: S(v) and v != "", "non-empty string"),
    "string:uuid": (lambda v: S(v) and UUID.match(v), "UUID"),
    "string:uuidv7": (lambda v: S(v) and UUID7.match(v), "UUIDv7"),
    "string:datetime": (lambda v: S(v) and DATETIME.match(v), "RFC 3339 datetime"),
    "number:positive": (lambda v: is_num(v) and v > 0, "positive number"),
    "number:non_negative": (lambda v: is_num(v) and v >= 0, "non-negative number"),
    "array:nonempty": (lambda v: L(v) and len(v) > 0, "non-empty array"),
    "array:empty": (lambda v: L(v) and not v, "empty array"),
}
PATTERNS = [
    (r"array:(?:min_length|min):(\d+)", lambda v, n: L(v) and len(v) >= int(n), "array of at least {}"),
    (r"array:length(?::|\()(\d+)\)?", lambda v, n: L(v) and len(v) == int(n), "array of length {}"),
    (r"contains:(.*)", lambda v, t: L(v) and any(gofmt(x) == t for x in v), "array containing {!r}"),
    (r"not_contains:(.*)", lambda v, t: L(v) and all(gofmt(x) != t for x in v), "array without {!r}"),
    (r"string:contains:(.*)", lambda v, t: S(v) and t in v, "string containing {!r}"),
    (r"number:range\((-?\d+(?:\.\d+)?),\s*(-?\d+(?:\.\d+)?)\)",
     lambda v, lo, hi: is_num(v) and float(lo) <= v <= float(hi), "number in [{}, {}]"),
    (r"~(\d+(?:\.\d+)?)", lambda v, w: is_num(v) and abs(v - float(w)) <= float(w) * 0.5, "~{}"),
    (r"string:pattern\((.*)\)", lambda v, p: S(v) and re.search(p, v), "string matching {}"),
]


def match_str(m, v):
    if m in FIXED:
        ok, what = FIXED[m][0](v), FIXED[m][1]
    else:
        for pat, pred, desc in PATTERNS:
            g = re.fullmatch(pat, m, re.S)
            if g:
                ok, what = pred(v, *g.groups()), desc.format(*g.groups())
                break
        else:
            ok, what = S(v) and v == m, json.dumps(m)
    if not ok:
        raise Mismatch("expected %s, got %s" % (what, json.dumps(v)))


def match_obj(m, v):
    if "$exists" in m:
        if m["$exists"] and v is None:
            raise Mismatch("expected field to exist, but it is missing")
        if not m["$exists"] and v is not None:
            raise Mismatch("expected field to not exist, got %s" % json.dumps(v))
        t = m.get("$type")
        if t and json_type(v) != t:
            raise Mismatch("expected type %s, got %s" % (t, json_type(v)))
        return
    if "$match" in m:
        if not (isinstance(v, str) and re.search(m["$match"], v)):
            raise Mismatch("expected string matching %r, got %s" % (m["$match"], json.dumps(v)))
        return
    for op in ("$in", "$or"):
        if op in m:
            for alt in m[op]:
                try:
                    return match(alt, v)
                except Mismatch:
                    pass
            raise Mismatch("value %s matched none of %s" % (json.dumps(v), json.dumps(m[op])))
    if "$size" in m:
        size = m["$size"]
        if not isinstance(v, list):
            raise Mismatch("expected array for $size, got %s" % json.dumps(v))
        if isinstance(size, dict):
            if len(v) < size.get("$gte", 0):
                raise Mismatch("expected array of size >= %s, got %d" % (size["$gte"], len(v)))
        elif len(v) != size:
            raise Mismatch("expected array of size %s, got %d" % (size, len(v)))
        return
    if "$empty" in m:
        return
    if "range" in m:
        rng = m["range"]
        if not is_num(v) or v < rng.get("min", -math.inf) or v > rng.get("max", math.inf):
            raise Mismatch("expected number in %s, got %s" % (json.dumps(rng), json.dumps(v)))
        return
    if not isinstance(v, dict):
        raise Mismatch("expected object, got %s" % json.dumps(v))
    for key, sub in m.items():
        if sub == "absent":
            if key in v:
                raise Mismatch("field %r: expected absent" % key)
            continue
        if key not in v:
            raise Mismatch("field %r: expected to exist but is missing" % key)
        try:
            match(sub, v[key])
        except Mismatch as e:
            raise Mismatch("field %r: %s" % (key, e))


def json_type(v):
    if isinstance(v, bool) or v is None:
        return "boolean" if v is not None else "null"
    return "number" if is_num(v) else {str: "string", list: "array", dict: "object"}.get(type(v), "?")


def fill(text, results):
    def sub(mo):
        parsed = results.get(mo.group(1))
        if not isinstance(parsed, dict):
            return mo.group(0)
        try:
            v = resolve(mo.group(2), parsed)
        except Mismatch:
            return mo.group(0)
        if v is None:
            return mo.group(0)
        if isinstance(v, str):
            return v
        if isinstance(v, float) and v == int(v):
            return str(int(v))
        return json.dumps(v, separators=(",", ":")) if isinstance(v, (dict, list, bool)) else str(v)

    return TEMPLATE.sub(sub, text)


def fill_obj(v, results):
    """Templates inside assertion paths and matcher values (strings of a decoded object)."""
    if isinstance(v, str):
        return fill(v, results)
    if isinstance(v, list):
        return [fill_obj(x, results) for x in v]
    if isinstance(v, dict):
        return {fill(k, results): fill_obj(x, results) for k, x in v.items()}
    return v


def check_status(want, got):
    if isinstance(want, int):
        return got == want
    if isinstance(want, str) and want.startswith("one_of:"):
        return str(got) in want[7:].split(",")
    try:
        match(want, got)
        return True
    except Mismatch:
        return False


def run_step(step, base, results):
    """One step; returns a list of failure messages."""
    delay = step.get("delay_ms", 0)
    if step.get("action") == "WAIT":
        time.sleep((step.get("duration_ms") or delay or 0) / 1000)
        return []
    if delay:
        time.sleep(delay / 1000)
    if step.get("action") == "ASSERT":
        return cross_assert(step, results)
    body = None
    if "raw_body" in step:
        body = fill(step["raw_body"], results).encode()
    elif "body" in step:
        body = fill(json.dumps(step["body"]), results).encode()
    headers = dict(step.get("headers") or {})
    if body is not None and not any(k.lower() == "content-type" for k in headers):
        headers["Content-Type"] = MEDIA
    req = urllib.request.Request(base + fill(step["path"], results), data=body, method=step["action"], headers=headers)
    t0 = time.monotonic()
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            status, rhead, raw = resp.status, resp.headers, resp.read()
    except urllib.error.HTTPError as e:
        status, rhead, raw = e.code, e.headers, e.read()
    except OSError as e:
        results[step["id"]] = None
        return ["%s: HTTP request failed: %s" % (step["id"], e)]
    took = (time.monotonic() - t0) * 1000
    try:
        parsed = json.loads(raw) if raw else None
    except ValueError:
        parsed = None
    results[step["id"]] = parsed if isinstance(parsed, dict) else None
    a = fill_obj(step.get("assertions") or {}, results)
    fails, sid = [], step["id"]
    if "status" in a and not check_status(a["status"], status):
        fails.append("%s: expected status %s, got %d: %s" % (sid, json.dumps(a["status"]), status, raw[:300].decode("utf-8", "replace")))
    if a.get("status_in") and status not in a["status_in"]:
        fails.append("%s: expected status in %s, got %d" % (sid, a["status_in"], status))
    body_a = a.get("body") or {}
    if isinstance(parsed, dict):
        alts = body_a.pop("$or", None)
        for path, m in body_a.items():
            try:
                match(m, resolve(path, parsed))
            except Mismatch as e:
                fails.append("%s: %s: %s" % (sid, path, e))
        if alts is not None and not any(all(ok(p, mm, parsed) for p, mm in alt.items()) for alt in alts):
            fails.append("%s: no $or alternative of the body matched" % sid)
    for path in a.get("body_absent") or []:
        try:
            v = resolve(path, parsed) if isinstance(parsed, dict) else None
        except Mismatch:
            v = None
        if v is not None:
            fails.append("%s: expected %s to be absent" % (sid, path))
    for k, want in (a.get("headers") or {}).items():
        got = rhead.get(k) or ""
        if not (got == want if isinstance(want, str) else ok("$.h", want, {"h": got})):
            fails.append("%s: header %s: expected %s, got %r" % (sid, k, json.dumps(want), got))
    tm = a.get("timing_ms") or {}
    if "less_than" in tm and took >= tm["less_than"]:
        fails.append("%s: took %dms, expected < %dms" % (sid, took, tm["less_than"]))
    if "greater_than" in tm and took <= tm["greater_than"]:
        fails.append("%s: took %dms, expected > %dms" % (sid, took, tm["greater_than"]))
    if "approximate" in tm and abs(took - tm["approximate"]) > max(tm["approximate"] * 0.5, 100):
        fails.append("%s: took %dms, expected ~%dms" % (sid, took, tm["approximate"]))
    for s in a.get("body_contains") or []:
        if s not in raw.decode("utf-8", "replace"):
            fails.append("%s: body does not contain %r" % (sid, s))
    if fails:
        fails[0] += "\n        body: " + raw[:600].decode("utf-8", "replace")
    return fails


def cross_assert(step, results):
    """ASSERT steps: exclusive_claim (exactly one of several fetches got the job)."""
    a = fill_obj(step.get("assertions") or {}, results)
    claim = a.get("exclusive_claim")
    if not claim:
        return []
    got = []
    for f in claim.get("fetches") or []:
        try:
            jobs = json.loads(f) if isinstance(f, str) else f
        except ValueError:
            jobs = None
        got.append(isinstance(jobs, list) and any(isinstance(j, dict) and j.get("id") == claim["job_id"] for j in jobs))
    fails = []
    if claim.get("exactly_one_has_job") and sum(got) != 1:
        fails.append("%s: %d fetches got job %s, expected exactly one" % (step["id"], sum(got), claim["job_id"]))
    return fails


def ok(path, m, parsed):
    try:
        match(m, resolve(path, parsed))
        return True
    except Mismatch:
        return False


def run_test(tc, base):
    results = {}
    for step in (tc.get("setup") or {}).get("steps") or []:
        fails = run_step(step, base, results)
        if fails:
            return "ERROR", ["setup " + fails[0]]
    fails = []
    for step in tc.get("steps") or []:
        fails += run_step(step, base, results)
    for step in (tc.get("teardown") or {}).get("steps") or []:
        run_step(step, base, results)
    return ("FAIL" if fails else "PASS"), fails


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("suites")
    ap.add_argument("url")
    ap.add_argument("--level", type=int)
    ap.add_argument("--test", help="run the cases whose test_id starts with this")
    ap.add_argument("-v", "--verbose", action="store_true", help="print every failed assertion")
    args = ap.parse_args()
    cases = []
    for root, _, files in os.walk(args.suites):
        for f in files:
            if f.endswith(".json"):
                with open(os.path.join(root, f)) as fh:
                    cases.append(json.load(fh))
    cases.sort(key=lambda c: c["test_id"])
    cases = [c for c in cases if args.level is None or c["level"] == args.level]
    cases = [c for c in cases if not args.test or c["test_id"].startswith(args.test)]
    counts = {}
    for tc in cases:
        status, fails = run_test(tc, args.url.rstrip("/"))
        c = counts.setdefault(tc["level"], {"PASS": 0, "FAIL": 0, "ERROR": 0})
        c[status] += 1
        print("%-5s %-12s %s" % (status, tc["test_id"], tc.get("name", "")))
        for f in fails if args.verbose else fails[:1]:
            print("      " + f)
        sys.stdout.flush()
    for lvl in sorted(counts):
        c = counts[lvl]
        print("level %d: %d passed, %d failed, %d errors of %d" % (lvl, c["PASS"], c["FAIL"], c["ERROR"], sum(c.values())))
    total = sum(c["PASS"] for c in counts.values())
    print("total: %d of %d passed" % (total, len(cases)))
    return 0 if total == len(cases) else 1


if __name__ == "__main__":
    sys.exit(main())
