#!/usr/bin/env bash
# What the docs promise, read back (output must not lie by omission):
#   (a) every `--flag` that README.md and docs/*.md show on a nebula-X command line is
#       listed by `nebula-X --help`; a flag shown alone (`--zero 1` in prose) by some
#       executable's --help (or it is another program's: mpirun, Slurm); a flag a page
#       shows being refused ("unknown option '--X'") is exempt. The other way: every
#       flag that `--help` of nebula-train, nebula-ckpt and nebula-bench lists is
#       documented somewhere; every `section.key` the pages show is a config key that
#       some executable's --help lists (or a fault point of libcore/base/fault.c);
#   (b) every key of a docs table headed "`metrics.jsonl` key | record | ..." is in
#       that record of a real run's metrics.jsonl (2 ranks as 2 nodes, DGC-Pro on, an
#       evaluation), and every dgc_* key the run's records carry is in such a table;
#       every `dgc_*` name the pages show is a metrics.jsonl key, record or stdout key
#       of that run (the README once promised dgc_sent_kB and dgc_ratio in
#       metrics.jsonl: they are on the stdout line only);
#   (c) nebula-bench's machine-readable formats are what they say: `model --json` and
#       `dgc --json` print one parseable JSON object per row, after their provenance row,
#       and nothing else on stdout; --csv the provenance comment line, a header and rows;
#       the GPU path, which has only its table, refuses them (exit 2), and a [bench] key a
#       subcommand does not read is refused, not ignored.
. "$(dirname "$0")/lib.sh"
licenses_data
for exe in train ckpt bench chaos fed model deploy infer; do build/bin/nebula-$exe --help >$tmp/help-$exe.txt 2>&1; done

# --- (a) flags ------------------------------------------------------------------------
$PY - "$tmp" README.md docs/*.md <<'PY'
import re, sys
tmp, pages = sys.argv[1], sys.argv[2:]
flag = re.compile(r'(?<![\w-])--[a-z][a-z0-9-]*')
helps = {e: set(flag.findall(open(f"{tmp}/help-{e}.txt").read())) for e in ("train", "ckpt", "bench", "chaos", "fed", "model", "deploy", "infer")}
anyhelp = set().union(*helps.values())
# other programs' flags that the pages show in prose: mpirun's, Slurm's, the local cluster tool's,
# jobscripts/submit's (an sbatch wrapper: validation/slurm/test_slurm.sh checks its options)
foreign = {"--oversubscribe", "--mpi", "--cpu-bind", "--cpus", "--dependency", "--exclusive", "--nodes",
           "--ntasks-per-node", "--open-mode", "--parsable", "--requeue", "--signal", "--time",
           "--partition", "--constraint", "--fallback-partition", "--fallback-constraint", "--max-wait"}
fails = 0
def fail(msg):
    global fails
    fails += 1
    print("FAIL - " + msg)
shown = {}      # (exe, flag) -> first place
alone = {}      # flag -> first place
documented = set()
for page in pages:
    text = open(page).read()
    refused = set(re.findall(r"unknown option '(--[a-z0-9-]+)'", text))
    documented |= set(flag.findall(text))
    code = False
    for no, line in enumerate(text.split("\n"), 1):
        if line.startswith("```"):
            code = not code
            continue
        where = f"{page}:{no}"
        for seg in ([line] if code else re.findall(r"`([^`]*)`", line)):
            parts = re.split(r"(?:build/bin/|\b)nebula-(train|ckpt|bench|chaos|fed|model|deploy|infer)\b", seg)
            if seg.lstrip().startswith("--"):
                for f in flag.findall(parts[0]):
                    if f not in refused: alone.setdefault(f, where)
            for i in range(1, len(parts), 2):
                rest = re.split(r"\||;|&&|\bmpirun\b|\bpython3?\b|\$\(", parts[i + 1])[0]
                for f in flag.findall(rest):
                    if f not in refused: shown.setdefault((parts[i], f), where)
for (exe, f), where in sorted(shown.items()):
    if f not in helps[exe]: fail(f"{where} shows nebula-{exe} {f}, which nebula-{exe} --help does not list")
for f, where in sorted(alone.items()):
    if f not in anyhelp and f not in foreign: fail(f"{where} shows {f}, which no nebula-* --help lists")
for exe in ("train", "ckpt", "bench", "model", "deploy", "infer"):
    missing = sorted(helps[exe] - documented - {"--help", "--version"})
    if missing: fail(f"nebula-{exe} --help lists {', '.join(missing)}, documented on no page (README.md, docs/*.md)")
# config keys: "[section]" then "  key = default" lines of every --help
keys = set()
for e in helps:
    section = None
    for line in open(f"{tmp}/help-{e}.txt"):
        m = re.match(r"\[(\w+)\]", line)
        if m: section = m.group(1)
        m = re.match(r"  (\w+) = ", line)
        if m and section: keys.add(f"{section}.{m.group(1)}")
points = set(re.findall(r'\{ "(\w+\.\w+)", "', open("libcore/base/fault.c").read()))
sections = {k.split(".")[0] for k in keys}
files = re.compile(r"\.(bin|h5|jsonl|json|ini|md|sh|c|h|py|csv|txt|safetensors|sbatch|log|list|tmp|old|cu|onnx|neb|npy|proto)$")
named = {}
for page in pages:
    for no, line in enumerate(open(page), 1):
        for span in re.findall(r"`([^`]+)`", line):
            for k in re.findall(r"(?<![\w./-])([a-z]+\.[a-z_0-9]+)(?![\w./-])", span):
                if k.split(".")[0] in sections and not files.search(k): named.setdefault(k, f"{page}:{no}")
for k, where in sorted(named.items()):
    if k not in keys and k not in points: fail(f"{where} shows {k}: no --help lists that key, nor is it a fault point")
print(f"ok - {len(shown)} flags shown on command lines, {len(alone)} alone, {len(named)} keys, checked against --help"
      if not fails else f"FAIL - {fails} flag(s) or key(s) the docs and --help disagree on")
sys.exit(1 if fails else 0)
PY
check "(a) documented flags and keys and --help agree" [ $? -eq 0 ]

# --- (b) metrics.jsonl keys -------------------------------------------------------------
d=$tmp/run
timeout 120 $MPIRUN -np 2 build/bin/nebula-train --config configs/train/gpt2-tiny-licenses.ini --run-dir $d \
    --set data.train=$data/train.bin --set data.val=$data/val.bin --set optim.schedule=constant \
    --set optim.warmup_steps=0 --set train.log_interval=2 --set train.eval_interval=4 --set train.eval_batches=1 \
    --set train.global_batch=8 --steps 4 --ranks-per-node 1 --set dgc.mode=on >$d.log 2>&1 </dev/null
check "a 4-step DGC-Pro run on 2 nodes" test -s $d/metrics.jsonl
$PY - $d/metrics.jsonl $d.log README.md docs/*.md <<'PY'
import json, re, sys
metrics, log, pages = sys.argv[1], sys.argv[2], sys.argv[3:]
records = [json.loads(l) for l in open(metrics) if l.strip()]
have = {}  # kind -> keys seen in its records
for r in records: have.setdefault(r.get("kind"), set()).update(r)
stdout_keys = set(re.findall(r"\b(dgc_\w+)=", open(log).read()))
fails = 0
def fail(msg):
    global fails
    fails += 1
    print("FAIL - " + msg)
documented = {}  # key -> (record, where)
names = {}       # every `dgc_*` name a page shows -> where
for page in pages:
    lines = open(page).read().split("\n")
    table = False
    for no, line in enumerate(lines, 1):
        for n in re.findall(r"`(dgc_[\w*]+)`", line): names.setdefault(n, f"{page}:{no}")
        if not line.startswith("|"):
            table = False
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if re.match(r"`?metrics\.jsonl`? key", cells[0]):
            table = True
            continue
        if table and len(cells) >= 2 and not set(cells[0]) <= set("-: "):
            kinds = re.findall(r"`([\w]+)`", cells[1])
            for key in re.findall(r"`([\w/]+)`", cells[0]):
                documented[key] = (kinds, f"{page}:{no}")
if not documented: fail("no page has a '`metrics.jsonl` key | record | meaning' table")
for key, (kinds, where) in sorted(documented.items()):
    if not any(key in have.get(k, ()) for k in kinds):
        fail(f"{where} documents metrics.jsonl key {key} in {'/'.join(kinds)} records; the run's records lack it")
for kind, keys in sorted(have.items(), key=lambda kv: str(kv[0])):
    for key in sorted(k for k in keys if k.startswith("dgc_")):
        if key not in documented: fail(f"metrics.jsonl carries {key} in {kind} records; no metrics.jsonl table documents it")
for n, where in sorted(names.items()):
    ok = (any(k.startswith(n[:-1]) for ks in have.values() for k in ks) if n.endswith("*") else
          n in have or any(n in ks for ks in have.values()) or n in stdout_keys)
    if not ok: fail(f"{where} names {n}: not a metrics.jsonl key or record, nor a key of the stdout step line")
if "dgc: gradient traffic between nodes" not in open(log).read(): fail("the run printed no DGC traffic total")
if not fails: print(f"ok - {len(documented)} documented metrics.jsonl keys and {len(names)} dgc_* names read back")
sys.exit(1 if fails else 0)
PY
check "(b) documented metrics.jsonl keys are in a real run's records, and its dgc_* keys documented" [ $? -eq 0 ]

# --- (c) nebula-bench's formats ---------------------------------------------------------------
jsonl() {  # jsonl FILE ROWS: every stdout line one JSON object, ROWS of them
    $PY -c 'import json,sys; r=[json.loads(l) for l in open(sys.argv[1])]; sys.exit(not (len(r)==int(sys.argv[2]) and all(isinstance(o,dict) for o in r)))' "$@" 2>/dev/null
}
build/bin/nebula-bench model --model gpt2-tiny --batch 1 --seq 16 --steps 2 --set bench.model_warmup=0 --json \
    >$tmp/model.json 2>$tmp/model.err
check "bench model --json: the provenance row, 2 step rows and a median row, one JSON object a line, the table on stderr" eval \
    "jsonl $tmp/model.json 4 && head -1 $tmp/model.json | grep -q '^{\"row\":\"provenance\",\"provenance\":{' &&
     grep -q '\"row\":\"median\"' $tmp/model.json && grep -q '# median\\|memory' $tmp/model.err"
build/bin/nebula-bench model --model gpt2-tiny --batch 1 --seq 16 --steps 2 --set bench.model_warmup=0 --csv \
    >$tmp/model.csv 2>/dev/null
check "bench model --csv: the provenance line, the header and 2 rows, nothing else on stdout" eval \
    "[ \$(wc -l <$tmp/model.csv) -eq 4 ] && head -1 $tmp/model.csv | grep -q '^# provenance: {' &&
     sed -n 2p $tmp/model.csv | grep -q '^step,fwd_ms,'"
build/bin/nebula-bench model --model gpt2-tiny --dry-run --json >$tmp/dry.json 2>/dev/null
check "bench model --dry-run --json: the provenance row and one object" jsonl $tmp/dry.json 2
expect "bench model --device cuda --json: refused (exit 2), not ignored" 2 "is not available on the GPU path" -- \
    build/bin/nebula-bench model --model gpt2-tiny --device cuda --json
expect "bench model --out: refused (exit 2), not ignored: the model rows go to stdout" 2 \
    "bench.out (set by --set) is not used by \`nebula-bench model\`" -- \
    build/bin/nebula-bench model --model gpt2-tiny --dry-run --out $tmp/model-out.json
expect "bench dgc --batch: refused (exit 2), naming the keys dgc reads" 2 "reads only these [bench] keys: count rounds" -- \
    build/bin/nebula-bench dgc --batch 4
build/bin/nebula-bench dgc --count 100000 --rounds 2 --json >$tmp/dgc.json 2>/dev/null
check "bench dgc --json: the provenance row and 5 rows, one JSON object a line" jsonl $tmp/dgc.json 6
finish
