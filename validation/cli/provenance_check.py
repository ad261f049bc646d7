#!/usr/bin/env python3
"""provenance_check.py — every file named carries the provenance of docs/benchmarks.md#provenance,
with every field non-empty and of its type, and prints one `ok -` or `FAIL -` line per file.

    provenance_check.py [--ranks N] [--hosts N] [--git REV] FILE...

Where it is: a JSON document's "provenance" key; JSON lines: the first line, {KIND:
"provenance", "provenance": {...}}; a CSV or text: the first line, "# provenance: {...}"
(a CSV's next line that is not a comment is its header, and csv.DictReader over the lines
that are not comments reads its rows); Markdown: the first line, "<!-- provenance: {...} -->".
--ranks: the ranks the run had (hosts[].ranks sum to it); --hosts: how many distinct hosts;
--git: the build's commit (default: `git rev-parse HEAD` of this checkout, or "unknown"
outside one). Exit 1 when a file fails.
"""
import argparse
import csv
import json
import os
import re
import subprocess
import sys

STRINGS = ("nebula_version", "git_revision", "date", "mpi_library", "blas", "onednn", "cpu_model", "cpu_isa",
           "cpu_isa_detail", "command")


def build_revision():
    """This checkout's commit, or "unknown" when the tree is not a git checkout."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    try:
        out = subprocess.run(["git", "-C", root, "rev-parse", "--verify", "-q", "HEAD"], capture_output=True,
                             text=True, timeout=30)
    except OSError:
        return "unknown"
    return out.stdout.strip() if out.returncode == 0 and out.stdout.strip() else "unknown"


def find(path):
    """(provenance object, where) from the file, or raise ValueError."""
    text = open(path, encoding="utf-8").read()
    first = text.split("\n", 1)[0]
    if first.startswith("# provenance: "):
        lines = [line for line in text.splitlines() if line and not line.startswith("#")]
        if path.endswith(".csv"):
            assert lines, "a CSV with no header"
            rows = list(csv.DictReader(lines))
            assert all(None not in r for r in rows), "a row with more fields than the header"
        return json.loads(first[len("# provenance: "):]), "first line # provenance:"
    if first.startswith("<!-- provenance: "):
        assert first.endswith(" -->"), "the Markdown comment is not closed on its line"
        return json.loads(first[len("<!-- provenance: "):-len(" -->")]), "first line <!-- provenance: -->"
    try:
        doc = json.loads(text)
        assert isinstance(doc, dict) and "provenance" in doc, "a JSON document without a provenance key"
        return doc["provenance"], "the document's provenance key"
    except json.JSONDecodeError:
        pass
    row = json.loads(first)  # JSON lines
    kinds = [k for k, v in row.items() if v == "provenance"]
    assert kinds and set(row) == {kinds[0], "provenance"}, f"the first line is not a provenance row: {first[:80]}"
    return row["provenance"], f'first line {{"{kinds[0]}": "provenance"}}'


def check(p, ranks, hosts, git):
    """A list of what is wrong with provenance object p."""
    bad = []
    for k in STRINGS:
        if not isinstance(p.get(k), str) or not p[k]:
            bad.append(f"{k} is {p.get(k)!r}, not a non-empty string")
    if isinstance(p.get("date"), str) and not re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", p["date"]):
        bad.append(f"date {p['date']!r} is not UTC ISO 8601 (YYYY-MM-DDTHH:MM:SSZ)")
    if p.get("git_revision") != git:
        bad.append(f"git_revision {p.get('git_revision')!r}, the build's is {git!r}")
    h = p.get("hosts")
    if not (isinstance(h, list) and h and all(isinstance(e, dict) and isinstance(e.get("host"), str) and e["host"]
                                             and isinstance(e.get("ranks"), int) and e["ranks"] > 0 for e in h)):
        bad.append(f"hosts {h!r} is not a list of {{host, ranks > 0}}")
    elif len({e["host"] for e in h}) != len(h):
        bad.append(f"hosts {h!r} names a host twice")
    else:
        if not isinstance(p.get("ranks"), int) or p["ranks"] != sum(e["ranks"] for e in h):
            bad.append(f"ranks {p.get('ranks')!r} is not the sum of hosts[].ranks")
        if ranks is not None and p.get("ranks") != ranks:
            bad.append(f"ranks {p.get('ranks')!r}, the run had {ranks}")
        if hosts is not None and len(h) != hosts:
            bad.append(f"{len(h)} hosts, the run had {hosts}")
    c = p.get("config")
    if not (isinstance(c, dict) and c and all(isinstance(v, str) for v in c.values())):
        bad.append("config is not a non-empty object of strings")
    return bad


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ranks", type=int)
    ap.add_argument("--hosts", type=int)
    ap.add_argument("--git", default=None)
    ap.add_argument("files", nargs="+")
    a = ap.parse_args()
    git = a.git or build_revision()
    if git == "unknown":
        print("    not a git checkout: git_revision must be \"unknown\"")
    fails = 0
    for path in a.files:
        try:
            p, where = find(path)
            bad = check(p, a.ranks, a.hosts, git)
        except (OSError, ValueError, AssertionError) as e:
            p, where, bad = {}, "", [f"no provenance: {e}"]
        name = os.path.basename(path)
        if bad:
            fails += 1
            print(f"FAIL - {name}: " + "; ".join(bad))
        else:
            hosts = ", ".join(f"{e['host']} x{e['ranks']}" for e in p["hosts"])
            print(f"ok - {name}: provenance ({where}): {p['git_revision'][:12]}, {hosts}, {p['cpu_isa']}, "
                  f"{len(p['config'])} config entries")
    sys.exit(1 if fails else 0)


if __name__ == "__main__":
    main()
