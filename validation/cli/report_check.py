#!/usr/bin/python3
"""report_check.py — fixtures for and checks of nebula-report (validation/cli/test_report.sh).

    report_check.py soak DIR              a nebula-chaos soak's samples.csv, report.json, report.md
                                          beside the training run in DIR/run
    report_check.py bench DIR             nebula-bench table dgc --csv and nebula-bench comm --out files
    report_check.py binning DIR           a run of 450 ranks records only (the heatmap bins them)
    report_check.py check HTML RUN SOAK   the page parses strictly and every figure carries its data
    report_check.py demo HTML             make demo's page: the figures of a training run with data
    report_check.py only HTML ID          the page holds figure ID alone
    report_check.py binned HTML           the binning run's heatmaps have at most 200 columns and say so
    report_check.py png FILE              a screenshot that is not blank

Each check prints one line per assertion ("ok - ..." or "FAIL - ...") and exits 1 on a failure.
The run checked is the trainer's own, with two planted effects (test_report.sh): rank 1 sleeps
in its compute (runtime.slowdown) and layer 2's gradient is zeroed (runtime.zero_grad_layer).
"""
import json
import math
import struct
import sys
import zlib

FAILS = []


def ok(cond, what):
    print(("ok - " if cond else "FAIL - ") + what)
    if not cond:
        FAILS.append(what)


def header(kind, step, launch=2):
    # the keys train_metrics_write adds to every record
    return {"kind": kind, "step": step, "time": "2026-01-01T00:00:00.000Z", "elapsed_s": 0.1 * step,
            "launch": launch, "job": "-"}


# ---- other tools' outputs: a soak directory, bench tables ---------------------------------------

def soak(d):
    rows = ["t_s,launch,step,rss_mb,fds,disk_mb,steps_per_s"]
    step, launch = 0, 1
    for i in range(60):
        t = 10.0 * i
        if t in (200.0, 400.0):
            launch += 1
            step -= 5
        step += 8
        rate = "nan" if i == 0 else f"{0.8 + 0.02 * math.sin(i):.3f}"
        rows.append(f"{t:.3f},{launch},{step},{300 + 0.2 * i + (launch - 1) * 3:.2f},{40 + launch},{2.0 + 0.05 * i:.3f},"
                    f"{rate}")
    open(f"{d}/samples.csv", "w").write("\n".join(rows) + "\n")
    faults = [{"kind": "kill", "what": "SIGKILL rank 1", "injected": True, "t_s": 198.0, "step": 150,
               "recover_s": 9.5, "lost_steps": 5},
              {"kind": "preempt", "what": "SIGUSR2 to every rank", "injected": True, "t_s": 398.0, "step": 300,
               "recover_s": 8.1, "lost_steps": 0}]
    rep = {"pass": True, "seconds": 600.0, "faults": 2, "faults_planned": 2, "launches": 3, "samples": 60,
           "goodput_steps_per_s": 0.78, "useful_steps": 470, "executed_steps": 480, "fault_list": faults,
           "rss_mb_per_h": 1.2, "fds_per_h": 0.0, "disk_mb_per_h": 18.0, "throughput_drop": 0.01}
    json.dump(rep, open(f"{d}/report.json", "w"), indent=2)
    open(f"{d}/report.md", "w").write("\n### nebula-chaos soak: PASS\n")


def bench(d):
    lines = ["# provenance: nebula-bench table dgc --csv; fixture of validation/cli/report_check.py",
             "model,params,link,dense_ms_per_step,dgc_ms_per_step,speedup,dense_final_loss,dgc_final_loss,"
             "traffic_reduction,measured"]
    for model, params, base, share in (("gpt2", "124M", 900.0, 1.0), ("bert-base", "110M", 800.0, 0.8)):
        for link, f in (("100mbit", 12.0), ("1gbit", 2.0), ("none", 1.0)):
            dense, dgc = base * (1 + share * (f - 1)), base * (1.0 + 0.05 * f)
            lines.append(f'{model},{params},{link},{dense:.0f},{dgc:.0f},{dense / dgc:.2f},5.91,5.93,212,"2026-01-01"')
    open(f"{d}/table-dgc.csv", "w").write("\n".join(lines) + "\n")
    rows = []
    for b in (8 * 4 ** k for k in range(9)):
        for algo, eff in (("ompi", 1.0), ("mpi", 0.97), ("flat", 0.9), ("hier", 1.25), ("auto", 1.2)):
            us = 5 + b / (2e3 * eff)
            bw = b / (us * 1e-6) / 1e9
            rows.append({"bytes": b, "count": b // 4, "type": "float", "algo": algo, "picked": "hier",
                         "time_us": us, "algbw_GBps": bw, "busbw_GBps": bw * 1.5, "wrong": 0})
    json.dump({"world_size": 4, "nnodes": 2, "backend": "mpi", "rows": rows}, open(f"{d}/comm-np4.json", "w"))


def binning(d):
    with open(f"{d}/metrics.jsonl", "w") as f:
        for s in range(1, 451):
            r = header("ranks", s, launch=1)
            r.update({"host": ["a", "b", "c"], "step_ms": [5.0, 6.0, 7.0 + s / 450], "comm_wait_ms": [1, 1, 1],
                      "cpu_pct": [90, 90, 90], "rss_mb": [100, 100, 100]})
            f.write(json.dumps(r) + "\n")


# ---- checks ------------------------------------------------------------------------------------

def parse(path):
    import html5lib
    try:
        doc = html5lib.HTMLParser(strict=True, namespaceHTMLElements=False).parse(open(path, "rb"))
    except Exception as e:  # html5lib raises ParseError at the first error, with its position
        ok(False, f"{path} parses with html5lib strict: {e}")
        sys.exit(1)
    ok(True, f"{path} parses with html5lib's strict parser")
    for el in doc.iter():
        if isinstance(el.tag, str) and "}" in el.tag:
            el.tag = el.tag.split("}", 1)[1]
    return doc


def points(el):
    return len(el.get("points", "").split())


def rows_by_value(svg):
    """data-row -> mean data-value of a heatmap's cells."""
    acc = {}
    for r in svg.iter("rect"):
        if r.get("data-row") is not None and r.get("data-value") is not None:
            acc.setdefault(r.get("data-row"), []).append(float(r.get("data-value")))
    return {k: sum(v) / len(v) for k, v in acc.items()}


def panel(fig, name, run):
    """The <svg> of a figure's panel NAME for a run (run None: the first such panel)."""
    for s in fig.iter("svg"):
        if s.get("data-panel") == name and (run is None or s.get("data-run") in (run, None)):
            return s
    return None


def check(path, run, soak_label):
    doc = parse(path)
    figs = {f.get("id"): f for f in doc.iter("figure")}
    want = ["fig-curves", "fig-resources", "fig-gradients", "fig-attention", "fig-dgc", "fig-timeline",
            "fig-soak", "fig-scaling"]
    ok(all(w in figs for w in want), f"every figure is there: {sorted(figs)}")
    for w in want:
        f = figs.get(w)
        ok(f is not None and f.find("figcaption") is not None and any(True for _ in f.iter("svg")),
           f"{w}: a caption and an <svg>")
    if any(w not in figs for w in want):
        return
    scripts = [s for s in doc.iter("script")] + [l for l in doc.iter("link")]
    ok(not scripts and b"http://" not in open(path, "rb").read().replace(b"http://www.w3.org/2000/svg", b""),
       "no scripts, links or network addresses: the page works offline")

    c = figs["fig-curves"]
    lines = {}
    for p in c.iter("polyline"):
        key = (p.get("data-series"), p.get("data-run"))
        lines[key] = lines.get(key, 0) + points(p)
    ok(lines.get(("loss/train", run), 0) >= 40, f"fig-curves: training loss of {run} over 40 steps "
       f"({lines.get(('loss/train', run), 0)} points)")
    ok(lines.get(("loss/eval", run), 0) >= 8, "fig-curves: held-out loss every 5 steps")
    ok(lines.get(("lr", run), 0) >= 40 and lines.get(("throughput", run), 0) >= 40, "fig-curves: lr and throughput")
    ok(lines.get(("loss/train", soak_label), 0) >= 10, f"fig-curves: the second run ({soak_label}) overlaid")
    marks = [g.get("data-marker") for g in c.iter("g") if g.get("data-marker")]
    ok("launch" in marks and marks.count("alert") >= 3, f"fig-curves: the relaunch and the alerts marked "
       f"({marks.count('launch')} launch, {marks.count('alert')} alert)")
    ok(any("replaced by the later launch" in "".join(p.itertext()) for p in c.iter("p")),
       "fig-curves: the redone steps are named")

    res = figs["fig-resources"]
    cells = {k: sum(1 for r in (panel(res, k, run) or []).iter("rect") if r.get("data-value"))
             for k in ("cpu_pct", "rss_mb", "comm_wait_share", "compute_ms", "step_ms")}
    ok(all(v >= 80 for v in cells.values()), f"fig-resources: five panels of 2 ranks x 40 steps {cells}")
    cm = rows_by_value(panel(res, "compute_ms", run)) if panel(res, "compute_ms", run) is not None else {}
    ok(cm and max(cm, key=cm.get) == "1", f"fig-resources: the straggler, rank 1, is the hottest row of compute_ms {cm}")
    ws = rows_by_value(panel(res, "comm_wait_share", run)) if panel(res, "comm_wait_share", run) is not None else {}
    ok(ws and max(ws, key=ws.get) == "0", f"fig-resources: rank 0, waiting for it, the hottest row of the wait {ws}")

    g = figs["fig-gradients"]
    hm = panel(g, "median_log10", run)
    med = rows_by_value(hm) if hm is not None else {}
    ok(len(med) == 4 and sum(1 for r in hm.iter("rect") if r.get("data-value")) >= 80,
       f"fig-gradients: 4 layers x 20 samples ({len(med)} rows)")
    cold = sorted(med, key=med.get) if med else []
    ok(len(cold) == 4 and cold[0] == "2" and med["2"] < med[cold[1]],
       f"fig-gradients: the dead layer 2 alone is the coldest row {med}")
    bars = [r for r in g.iter("rect") if r.get("data-bin")]
    ok(len(bars) >= 3 * 5 and any(r.get("data-bin") == "zero" and r.get("data-layer") == "2" for r in bars),
       f"fig-gradients: the last histograms as bars, layer 2 all in the zero bin ({len(bars)} bars)")

    a = figs["fig-attention"]
    for k in ("entropy", "max_weight"):
        p = panel(a, k, run)
        n = sum(1 for r in p.iter("rect") if r.get("data-value")) if p is not None else 0
        ok(n == 8, f"fig-attention: {k}, 2 layers x 4 heads ({n} cells)")

    d = panel(figs["fig-dgc"], "density", run)
    n = sum(1 for r in d.iter("rect") if r.get("data-value")) if d is not None else 0
    ok(n >= 26 * 40, f"fig-dgc: a density per tensor and step ({n} cells)")

    t = figs["fig-timeline"]
    ph = [r for r in t.iter("rect") if r.get("data-phase")]
    gantt = [r for r in t.iter("rect") if r.get("data-cat")]
    kinds = {r.get("data-phase") for r in ph}
    ok(len(ph) >= 6 and {r.get("data-rank") for r in ph} == {"0", "1"} and
       {"dgc select", "dgc exchange"} <= kinds and kinds - {"dgc select", "dgc encode", "dgc exchange"},
       f"fig-timeline: DGC-Pro's and the dense run's bucket phases stacked for ranks 0 and 1 ({len(ph)} segments: {sorted(kinds)})")
    ok(len(gantt) >= 2 * 2 * 8, f"fig-timeline: the Gantt chart of one step of each run ({len(gantt)} events)")
    g0 = next((x for x in t.iter("svg") if x.get("data-panel") == "gantt"), None)  # the first run's
    ms = {}
    for r in (g0.iter("rect") if g0 is not None else []):
        if r.get("data-cat") in ("compute", "comm"):
            k = (r.get("data-rank"), r.get("data-cat"))
            ms[k] = ms.get(k, 0) + float(r.get("data-dur-ms"))
    ok(ms.get(("1", "compute"), 0) > ms.get(("0", "compute"), 0) + 10 and
       ms.get(("0", "comm"), 0) > ms.get(("1", "comm"), 0) + 10,
       f"fig-timeline: in the Gantt chart the straggler computes, rank 0 waits, 20 ms each ({ms})")

    s = figs["fig-soak"]
    sl = {p.get("data-series"): points(p) for p in s.iter("polyline")}
    ok(all(sl.get(k, 0) >= 50 for k in ("rss_mb", "fds", "steps_per_s")), f"fig-soak: RSS, descriptors, rate {sl}")
    rss = panel(s, "rss_mb", None)
    fm = [g.get("data-marker") for g in rss.iter("g") if g.get("data-marker")] if rss is not None else []
    ok(fm.count("fault") == 2 and fm.count("launch") == 2, f"fig-soak: 2 faults and 2 relaunches marked {fm}")

    sc = figs["fig-scaling"]
    series = {}
    for p in sc.iter("polyline"):
        series.setdefault(p.get("data-series"), []).append(points(p))
    ok(len(series.get("ms_per_step", [])) == 4 and min(series["ms_per_step"]) >= 3,
       f"fig-scaling: dense and DGC-Pro step times of 2 models over 3 links {series.get('ms_per_step')}")
    ok(len(series.get("busbw", [])) == 5 and min(series["busbw"]) >= 9,
       f"fig-scaling: bus bandwidth of 5 algorithms over 9 sizes {series.get('busbw')}")
    ok(any("provenance:" in "".join(p.itertext()) for p in sc.iter("pre")), "fig-scaling: the # provenance line quoted")

    prov = [x for x in doc.iter("section") if x.get("id") == "provenance"]
    text = "".join(prov[0].itertext()) if prov else ""
    det = [x for x in prov[0].iter("details")] if prov else []
    launches = [x for x in prov[0].iter("tr") if x.get("data-launch")] if prov else []
    ok(bool(prov) and bool(det) and "[model]" in "".join(det[0].itertext()) and len(launches) >= 3 and "vm" in text,
       f"provenance: config.ini folded in <details>, {len(launches)} launch rows with their host")


def demo(path):
    doc = parse(path)
    figs = {f.get("id"): f for f in doc.iter("figure")}
    for w in ("fig-curves", "fig-resources", "fig-gradients", "fig-attention", "fig-timeline"):
        f = figs.get(w)
        n = 0 if f is None else sum(1 for r in f.iter("rect") if r.get("data-value") or r.get("data-phase")
                                    or r.get("data-cat")) + sum(points(p) for p in f.iter("polyline"))
        empty = f is not None and any(p.get("class") == "nodata" for p in f.iter("p"))
        ok(n >= 8 and not empty, f"make demo's {w}: {n} data elements, no 'no data' note")
    c = figs.get("fig-curves")
    marks = [g.get("data-marker") for g in c.iter("g") if g.get("data-marker")] if c is not None else []
    ok("launch" in marks, "make demo's fig-curves: the resumed launch marked")


def only(path, fid):
    doc = parse(path)
    ids = [f.get("id") for f in doc.iter("figure")]
    ok(ids == [fid], f"--only {fid}: the page holds that figure alone {ids}")


def binned(path):
    doc = parse(path)
    fig = [f for f in doc.iter("figure") if f.get("id") == "fig-resources"][0]
    cols = {r.get("data-col") for r in fig.iter("rect") if r.get("data-value")}
    note = " ".join("".join(p.itertext()) for p in fig.iter("p"))
    ok(len(cols) <= 200 and "binned" in note, f"450 samples binned into {len(cols)} columns, and said so")
    sm = rows_by_value(panel(fig, "step_ms", None))
    ok(max(sm, key=sm.get) == "2", "binned: the means keep rank 2 the hottest")


def png_pixels(path):
    """(width, height, RGB bytes) of a PNG: PIL where it is installed, else zlib and the chunks."""
    try:
        from PIL import Image
        im = Image.open(path).convert("RGB")
        return im.width, im.height, im.tobytes()
    except ImportError:
        pass
    data = open(path, "rb").read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, w, h, bpp = 8, b"", 0, 0, 3
    while pos < len(data):
        n, typ = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        if typ == b"IHDR":
            w, h, depth, ctype = struct.unpack(">IIBB", body[:10])
            assert depth == 8 and ctype in (2, 6), f"PNG colour type {ctype} depth {depth}"
            bpp = 3 if ctype == 2 else 4
        elif typ == b"IDAT":
            idat += body
        pos += 12 + n
    raw, out, prev, stride = zlib.decompress(idat), bytearray(), bytearray(w * bpp), w * bpp
    for y in range(h):
        f, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b, c = prev[i], prev[i - bpp] if i >= bpp else 0
            if f == 1: line[i] = (line[i] + a) & 255
            elif f == 2: line[i] = (line[i] + b) & 255
            elif f == 3: line[i] = (line[i] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        prev = line
        for x in range(w):
            out += line[x * bpp:x * bpp + 3]
    return w, h, bytes(out)


def png(path):
    w, h, px = png_pixels(path)
    n = w * h
    colours = {px[i:i + 3] for i in range(0, len(px), 3 * 7)}  # every 7th pixel
    nonwhite = sum(1 for i in range(0, len(px), 3 * 7) if px[i:i + 3] != b"\xff\xff\xff") * 7
    ok(len(colours) >= 20 and nonwhite >= 0.02 * n,
       f"the screenshot {w}x{h} is not blank: {len(colours)} colours, {100 * nonwhite / n:.1f}% not white")


def main(argv):
    cmd, args = argv[1], argv[2:]
    {"demo": demo, "soak": soak, "bench": bench, "binning": binning, "check": check, "only": only,
     "binned": binned, "png": png}[cmd](*args)
    return 1 if FAILS else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
