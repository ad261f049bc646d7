#!/usr/bin/python3
"""trace_check — checks a Chrome trace-event JSON file (nebula-train --trace writes
RUN_DIR/trace.json; the format: Google's "Trace Event Format" document) as Perfetto and
chrome://tracing read it, strictly:

  - strict JSON (NaN and Infinity refused), a top-level object with a "traceEvents" list
    (the bare-array form is refused: otherData and displayTimeUnit need the object);
  - every event an object with "name" (a string), "ph" (one of the format's phases),
    "pid" and "tid" (integers or strings) and "ts" (a number >= 0);
  - complete events ("X") have "dur" >= 0; "B"/"E" pairs balance per (pid, tid), an "E"
    never before its "B", with the same name when it names one;
  - metadata events ("M") are the format's five, with their argument: process_name and
    thread_name an args.name string, process_labels args.labels, process_sort_index and
    thread_sort_index an integer args.sort_index;
  - complete events on one track (pid, tid) nest: two either are disjoint or one holds the
    other, never a partial overlap (times compared exactly, as decimals).

Exits 0 with one summary line, or 1 naming the first offending event (its index in
traceEvents and its text). --self-test feeds it broken traces and checks that it rejects
each one for the expected reason, and accepts the good ones.

Usage: trace_check.py FILE | trace_check.py --self-test"""
import json
import sys
from decimal import Decimal

PHASES = set("BEXiICbnestfPONDMVvRc()")
METADATA = {"process_name": "name", "thread_name": "name", "process_labels": "labels",
            "process_sort_index": "sort_index", "thread_sort_index": "sort_index"}


class Bad(Exception):
    """The trace is not valid: the message names the event."""


def refuse_constant(c):
    raise Bad(f"not strict JSON: the constant {c}")


def number(v):
    return isinstance(v, (int, Decimal)) and not isinstance(v, bool)


def ident(v):
    return (isinstance(v, int) and not isinstance(v, bool)) or isinstance(v, str)


def plain(v):
    """v with its decimals as floats, for messages."""
    if isinstance(v, dict):
        return {k: plain(x) for k, x in v.items()}
    if isinstance(v, list):
        return [plain(x) for x in v]
    return float(v) if isinstance(v, Decimal) else v


def show(e):
    text = json.dumps(plain(e))
    return text if len(text) <= 200 else text[:197] + "..."


def check_event(i, e):
    """The fields every event needs; returns (pid, tid)."""
    if not isinstance(e, dict):
        raise Bad(f"event #{i} is not an object: {show(e)}")
    if not isinstance(e.get("name"), str):
        raise Bad(f"event #{i} has no name string: {show(e)}")
    if e.get("ph") not in PHASES:
        raise Bad(f"event #{i} has ph {e.get('ph')!r}, not one of the format's phases: {show(e)}")
    for k in ("pid", "tid"):
        if not ident(e.get(k)):
            raise Bad(f"event #{i} has no integer or string {k}: {show(e)}")
    if not number(e.get("ts")) or e["ts"] < 0:
        raise Bad(f"event #{i} has no ts number >= 0: {show(e)}")
    ph = e["ph"]
    if ph == "X" and (not number(e.get("dur")) or e["dur"] < 0):
        raise Bad(f"complete event #{i} has no dur number >= 0: {show(e)}")
    if ph == "M":
        key = METADATA.get(e["name"])
        if key is None:
            raise Bad(f"metadata event #{i} is {e['name']!r}, not one of {sorted(METADATA)}: {show(e)}")
        args = e.get("args")
        v = args.get(key) if isinstance(args, dict) else None
        ok = isinstance(v, str) if key in ("name", "labels") else isinstance(v, int) and not isinstance(v, bool)
        if not ok:
            raise Bad(f"metadata event #{i} ({e['name']}) lacks args.{key}: {show(e)}")
    if "args" in e and not isinstance(e["args"], dict):
        raise Bad(f"event #{i} has args that are not an object: {show(e)}")
    return (e["pid"], e["tid"])


def check_begin_end(events):
    """B/E balanced per track, in file order (the format's rule for duration events)."""
    open_ = {}
    for i, e in enumerate(events):
        if e["ph"] not in ("B", "E"):
            continue
        stack = open_.setdefault((e["pid"], e["tid"]), [])
        if e["ph"] == "B":
            stack.append(i)
            continue
        if not stack:
            raise Bad(f"E event #{i} ends nothing: no B open on pid {e['pid']} tid {e['tid']}: {show(e)}")
        b = events[stack.pop()]
        if e["ts"] < b["ts"]:
            raise Bad(f"E event #{i} is before its B ({b['ts']}): {show(e)}")
        if e["name"] and b["name"] and e["name"] != b["name"]:
            raise Bad(f"E event #{i} closes B {b['name']!r} under another name: {show(e)}")
    for track, stack in open_.items():
        if stack:
            i = stack[0]
            raise Bad(f"B event #{i} is never ended (pid {track[0]} tid {track[1]}): {show(events[i])}")


def check_nesting(events):
    """Complete events of one track: disjoint or nested. Sorted by start, the longest
    first at one start, each must end inside every event still open around it."""
    tracks = {}
    for i, e in enumerate(events):
        if e["ph"] == "X":
            tracks.setdefault((e["pid"], e["tid"]), []).append(i)
    worst = None  # the offending pair whose later event comes first in the file
    for track, idx in tracks.items():
        idx.sort(key=lambda i: (events[i]["ts"], -events[i]["dur"], i))
        stack = []
        for i in idx:
            ts, end = events[i]["ts"], events[i]["ts"] + events[i]["dur"]
            while stack and events[stack[-1]]["ts"] + events[stack[-1]]["dur"] <= ts:
                stack.pop()
            if stack and end > events[stack[-1]]["ts"] + events[stack[-1]]["dur"]:
                pair = (max(i, stack[-1]), min(i, stack[-1]))
                worst = pair if worst is None or pair < worst else worst
                continue
            stack.append(i)
    if worst:
        i, j = worst
        raise Bad(f"complete event #{i} overlaps #{j} on pid {events[i]['pid']} tid {events[i]['tid']} without "
                  f"nesting: {show(events[i])} against {show(events[j])}")


def check_text(text):
    """The summary line, or raises Bad."""
    try:
        doc = json.loads(text, parse_float=Decimal, parse_constant=refuse_constant)
    except ValueError as e:
        raise Bad(f"not JSON: {e}")
    if not isinstance(doc, dict):
        raise Bad("the top level is not an object (the bare-array form lacks otherData and displayTimeUnit)")
    events = doc.get("traceEvents")
    if not isinstance(events, list):
        raise Bad("the object has no traceEvents list")
    if "displayTimeUnit" in doc and doc["displayTimeUnit"] not in ("ms", "ns"):
        raise Bad(f"displayTimeUnit is {doc['displayTimeUnit']!r}, not ms or ns")
    if "otherData" in doc and not isinstance(doc["otherData"], dict):
        raise Bad("otherData is not an object")
    tracks = {check_event(i, e) for i, e in enumerate(events)}
    check_begin_end(events)
    check_nesting(events)
    nx = sum(e["ph"] == "X" for e in events)
    nm = sum(e["ph"] == "M" for e in events)
    return (f"{len(events)} events ({nx} complete, {nm} metadata), {len({p for p, _ in tracks})} processes, "
            f"{len(tracks)} tracks")


def self_test():
    meta = '{"name":"thread_name","ph":"M","pid":0,"tid":0,"ts":0,"args":{"name":"main"}}'
    x = lambda ts, dur, tid=0, name="a": (f'{{"name":"{name}","ph":"X","pid":0,"tid":{tid},"ts":{ts},'
                                          f'"dur":{dur},"args":{{}}}}')
    doc = lambda *ev: '{"traceEvents":[' + ",".join(ev) + '],"displayTimeUnit":"ms","otherData":{}}'
    good = [
        ("nested and disjoint events, two tracks overlapping each other",
         doc(meta, x(0, 10), x(1, 2), x(3, 7), x(10, 1), x(5, 20, tid=1))),
        ("a child ending exactly at its parent's end, decimals", doc(x("1.5", "2.25"), x("2.5", "1.25"))),
        ("balanced B/E and the other metadata", doc('{"name":"s","ph":"B","pid":1,"tid":2,"ts":1}',
                                                    '{"name":"s","ph":"E","pid":1,"tid":2,"ts":3}',
                                                    '{"name":"process_sort_index","ph":"M","pid":1,"tid":0,"ts":0,'
                                                    '"args":{"sort_index":1}}')),
        ("no events at all", doc()),
    ]
    bad = [
        ("a top-level array", "[" + x(0, 1) + "]", "top level is not an object"),
        ("no traceEvents", '{"events":[]}', "no traceEvents list"),
        ("traceEvents not a list", '{"traceEvents":{}}', "no traceEvents list"),
        ("NaN", doc(x("NaN", 1)), "not strict JSON"),
        ("not JSON", '{"traceEvents":[', "not JSON"),
        ("an event without a name", doc('{"ph":"X","pid":0,"tid":0,"ts":0,"dur":1}'), "no name"),
        ("a phase the format lacks", doc('{"name":"a","ph":"Z","pid":0,"tid":0,"ts":0}'), "ph 'Z'"),
        ("no pid", doc('{"name":"a","ph":"X","tid":0,"ts":0,"dur":1}'), "pid"),
        ("a boolean tid", doc('{"name":"a","ph":"X","pid":0,"tid":true,"ts":0,"dur":1}'), "tid"),
        ("a negative ts", doc(x(-1, 1)), "ts number >= 0"),
        ("a string ts", doc(x('"5"', 1)), "ts number >= 0"),
        ("an X without dur", doc('{"name":"a","ph":"X","pid":0,"tid":0,"ts":0}'), "dur"),
        ("an X with a negative dur", doc(x(0, -1)), "dur"),
        ("a B never ended", doc('{"name":"s","ph":"B","pid":0,"tid":0,"ts":1}'), "never ended"),
        ("an E without a B", doc('{"name":"s","ph":"E","pid":0,"tid":0,"ts":1}'), "ends nothing"),
        ("an E on another track than its B", doc('{"name":"s","ph":"B","pid":0,"tid":0,"ts":1}',
                                                 '{"name":"s","ph":"E","pid":0,"tid":1,"ts":2}'), "ends nothing"),
        ("an E before its B", doc('{"name":"s","ph":"B","pid":0,"tid":0,"ts":5}',
                                  '{"name":"s","ph":"E","pid":0,"tid":0,"ts":2}'), "before its B"),
        ("thread_name without args.name", doc('{"name":"thread_name","ph":"M","pid":0,"tid":0,"ts":0,"args":{}}'),
         "lacks args.name"),
        ("process_name with a number", doc('{"name":"process_name","ph":"M","pid":0,"tid":0,"ts":0,'
                                           '"args":{"name":3}}'), "lacks args.name"),
        ("an unknown metadata event", doc('{"name":"color","ph":"M","pid":0,"tid":0,"ts":0,"args":{"name":"x"}}'),
         "not one of"),
        ("partial overlap on one track", doc(x(0, 10), x(5, 10)), "overlaps"),
        ("partial overlap by a thousandth", doc(x("0.000", "10.000"), x("2.000", "8.001")), "overlaps"),
        ("a child outliving its parent inside a grandparent", doc(x(0, 100), x(10, 20), x(15, 20)), "overlaps"),
    ]
    fails = 0
    for what, text in good:
        try:
            check_text(text)
            print(f"ok - accepts {what}")
        except Bad as e:
            print(f"FAIL - rejects {what}: {e}")
            fails += 1
    for what, text, why in bad:
        try:
            check_text(text)
            print(f"FAIL - accepts {what}")
            fails += 1
        except Bad as e:
            if why in str(e):
                print(f"ok - rejects {what}: {e}")
            else:
                print(f"FAIL - rejects {what} for another reason: {e} (expected '{why}')")
                fails += 1
    print(f"self-test: {len(good) + len(bad) - fails} of {len(good) + len(bad)} cases as expected")
    return 1 if fails else 0


def main(argv):
    if argv[1:] == ["--self-test"]:
        return self_test()
    if len(argv) != 2 or argv[1].startswith("-"):
        print(__doc__.strip().split("\n\n")[-1], file=sys.stderr)
        return 2
    try:
        with open(argv[1], encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as e:
        print(f"trace_check: {argv[1]}: cannot read: {e}")
        return 1
    try:
        print(f"trace_check: {argv[1]}: ok: {check_text(text)}")
        return 0
    except Bad as e:
        print(f"trace_check: {argv[1]}: {e}")
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
