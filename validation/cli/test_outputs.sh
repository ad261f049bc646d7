#!/usr/bin/env bash
# test_outputs — the one output rule and the safe opens (docs/design.md#outputs):
#   - lint: every call in libcore/ and apps/ that writes, creates or renames a file (rename,
#     renameat, fopen "w"/"a"/"r+", O_CREAT/O_WRONLY/O_RDWR, json_dump_file, H5Fcreate, link,
#     linkat, symlink, truncate, ftruncate, ...) is in
#     the list below with the reason it is safe (the output rule checked first, or a
#     file Nebula names itself); every call that opens a file to read it (open, fopen,
#     H5Fopen, json_load_file) that is not path_open_regular / path_open_own is listed
#     too. A new site fails the test until it is listed, a listed site that is gone too;
#   - nebula-report --out RUN_DIR/metrics.jsonl, a committed checkpoint's state.h5,
#     config.ini, heartbeat, profile-shapes and control.applied exit 2 naming the file,
#     and leave every file of the run
#     directory as it was (checksums);
#   - a scratch character device (mknod) as profile.shapes, report --out, convert --out,
#     reshard --out, migrate-config -o, bench --out exits 2 and stays a character device; prepare's
#     output onto its own input exits 2;
#   - a FIFO as profile.shapes exits 2 at once at 1 and 2 ranks, naming it (it hung);
#   - a symbolic link as RUN_DIR/reload/v000001.req (to a file with a secret line) is
#     refused naming the link, and no file of the run directory holds the secret;
#   - /proc/self/status and a link to /proc/self/mem as --config exit 2 (read as empty);
#   - --run-dir a committed checkpoint, inside one, or inside another run's ckpt/ or tb/
#     exits 2 naming the place and creates nothing; so do prepare into a new directory
#     inside a checkpoint and nebula-chaos --out there; nebula-chaos checks its outputs
#     before it removes OUT/run;
#   - nebula-train control on a directory without a run exits 2 and creates nothing;
#     migrate-config exits 2 when it cannot write its output.
set -u
cd "$(dirname "$0")/../.."
. validation/cli/lib.sh
export OMPI_MCA_rmaps_base_oversubscribe=1
TRAIN=build/bin/nebula-train
REPORT=build/bin/nebula-report
CK=build/bin/nebula-ckpt

# --- lint: the write and read sites ----------------------------------------------------
# KIND FILE | TEXT ON THE LINE | why it is safe. W: writes, creates or renames; R: opens to
# read that do not go through path_open_regular / path_open_own.
cat >"$tmp/allow.txt" <<'EOF'
W apps/bench/bench_comm.c | path_write_atomic(path, "bench table" | --out: path_output_check at the start of bench_comm_run
W apps/chaos/launch.c | fopen(log, "a") | nebula-chaos's launch logs inside its own OUT directory
W apps/chaos/launch.c | open(log, O_WRONLY | O_APPEND | O_CREAT | the same launch logs, as the ranks' stdout
W apps/chaos/launch.c | open(path, O_RDWR | O_CLOEXEC) | the corrupt fault: flips bytes of its own run's newest checkpoint on purpose
W apps/chaos/ranks.c | fopen(tmp, "w") | the rank registry in the scenario's own directory
W apps/chaos/ranks.c | rename(tmp, path) | the same registry entry, renamed whole
W apps/chaos/ranks.c | open(log, O_WRONLY | O_APPEND | O_CREAT | a rank's log in the scenario's own directory
W apps/chaos/scenario.c | open(path, O_WRONLY | O_CREAT | O_TRUNC | the disk-full fault's filler in the scenario's tmpfs
W apps/chaos/launch.c | path_write_atomic(path, "report" | OUT/report.md and OUT/report.json: path_output_check in fresh_out
W apps/chaos/soak.c | fdopen(fd, "w") | OUT/samples.csv: path_output_check in fresh_out; the name unlinked, a fresh file made by path_create_regular (O_EXCL, O_NOFOLLOW)
W apps/report/main.c | path_write_atomic(out, "report" | --out: path_output_check in main
W libcore/base/config_migrate.c | path_write_atomic(out, "migrated config" | -o: path_output_check in config_migrate
W libcore/fed/fed_state.c | path_write_atomic(path, "clients table" | RUN_DIR/clients.json, a name the run gives itself, after fed.run_dir passed path_in_run_state
W libcore/base/watchdog.c | open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | RUN_DIR/beacons, the run's own file, never through a link
W libcore/ckpt/ckpt.c | open(h5, O_WRONLY | O_CLOEXEC) | the saver's own state.h5 in the .tmp step directory it created
W libcore/ckpt/ckpt.c | open(h5, O_WRONLY | O_CLOEXEC | O_DIRECT) | the same file, direct I/O
W libcore/ckpt/ckpt_dir.c | open(tmp, O_WRONLY | O_CREAT | O_TRUNC | the commit marker's temporary (docs/design.md#checkpoints)
W libcore/ckpt/ckpt_dir.c | rename( | the commit protocol's renames under ckpt/ (docs/design.md#checkpoints)
W libcore/ckpt/ckpt_file.c | H5Fcreate(path, H5F_ACC_TRUNC | state.h5 in the .tmp step directory the saver created
W libcore/ckpt/ckpt_file.c | H5Fopen(path, H5F_ACC_RDWR | the same file, reopened by the saver
W libcore/ckpt/ckpt_file.c | open(path, O_WRONLY | O_CLOEXEC), rc | the same file, for fsync
W libcore/ckpt/tool/ckpt_export.c | H5Fcreate(path, H5F_ACC_EXCL | the export's new file in its own temporary step directory (ckpt_out_check_step); its input a catalog's file
W libcore/ckpt/tool/ckpt_upgrade.c | open(dst, O_WRONLY | O_CREAT | O_EXCL | the upgrade's copy in its own temporary directory (O_EXCL)
W libcore/ckpt/tool/ckpt_upgrade.c | H5Fopen(path, H5F_ACC_RDWR | that copy, rewritten before it is committed
W libcore/ckpt/tool/llmc.c | path_write_atomic(path, "llm.c model file" | convert --to llmc --out: path_output_check in convert_to
W libcore/ckpt/tool/hf.c | rename(dir, old) | convert --to hf: an earlier export (hf_dir_check: regular files with config.json) moved aside before the new one is renamed in
W libcore/ckpt/tool/hf.c | renameat2(AT_FDCWD, tmp, AT_FDCWD, dir, RENAME_EXCHANGE) | convert --to hf: its own finished temporary exchanged with an earlier export at --out (hf_dir_check in convert_to)
W libcore/ckpt/tool/hf.c | rename(tmp, dir) | convert --to hf: its own finished DIR.tmp.PID renamed to --out (hf_dir_check in convert_to)
W libcore/ckpt/tool/hf.c | rename(old, dir) | puts the earlier export back when that rename fails
W libcore/ckpt/tool/hf.c | path_write_atomic(path, "config.json" | inside its own DIR.tmp.PID
W libcore/ckpt/tool/safetensors.c | path_write_atomic(path, "safetensors file" | convert --to safetensors --out: path_output_check in convert_to
W libcore/comm/comm_tune.c | path_write_atomic(path, "tuning table" | --save-tune: path_output_check at the start of bench_comm_run
W libcore/model/repo_store.c | rename(tmp, path) | repo_write_file: its own temporary (path_create_regular, O_EXCL) renamed over a repository file; a rename replaces a link, never writes its target
W libcore/model/repo_store.c | link(tmp, lock) | a ref's lock claimed by link(2) from its own temporary, never replacing an existing name
W libcore/model/repo_manifest.c | rename(tmp, fin) | a checkout's own .step_N.tmp directory renamed to step_N, checked not to exist
W libcore/nn/gemm_tune.c | path_write_atomic(path, "GEMM tuning table" | model --save-tune: path_output_check at the start of bench_model_run
W libcore/data/data_prepare.c | rename(o->tmp, o->path) | prepare's token files: path_output_check in prepare_main; both renamed once complete
W libcore/data/data_prepare_tok.c | open(tmp, O_WRONLY | O_NOFOLLOW) | prepare --tokenizer: each rank writes its tokens into the temporary rank 0 created (O_EXCL), after path_output_check in prepare_main
W libcore/data/data_prepare_tok.c | ftruncate(fd, (off_t)(hb + count | sizes that temporary, which rank 0 just created (O_EXCL)
W libcore/data/data_prepare_tok.c | rename(p->tmp[s], outs[s]) | that temporary renamed over train.bin / val.bin once every rank fsync'd
W libcore/data/data_prepare_tok.c | rename(a, b) | the tokenizer's files, staged in OUT_DIR/.prepare.PID, renamed into prepare's OUT_DIR
W libcore/data/tok_files.c | path_write_atomic(path, "tokenizer file" | the tokenizer's files in prepare's OUT_DIR or convert --to hf's DIR
W libcore/data/data_folder.c | H5Fcreate(ps->tmp, H5F_ACC_TRUNC | prepare --images: OUT.tmp.PID, after path_output_check in data_prepare_images
W libcore/data/data_folder.c | rename(tmp, out) | the same file renamed over --out once complete
W libcore/record/tfevent.c | ftruncate(w->fd, w->size) | cuts a torn record off its own event file, created by path_create_regular (O_EXCL)
W libcore/record/tracefile.c | fdopen(fd2, "w") | inside path_write_atomic's fill: the temporary it created
W libcore/record/tracefile.c | path_write_atomic(path, "trace" | RUN_DIR/trace.json, the run's own file
W libcore/train/control/elastic.c | ftruncate(r->heartbeat_fd | sizes RUN_DIR/heartbeat, opened by path_create_regular (O_NOFOLLOW)
W libcore/train/control/elastic.c | rename(path, to) | RUN_DIR/control retired under another name in the run directory (a rename moves a link, never writes its target)
W libcore/train/control/elastic.c | path_write_atomic(path, "relaunch file" | RUN_DIR/relaunch, the run's own file
W libcore/train/control/reload.c | path_write_atomic(tmp, "reload request" | RUN_DIR/reload/.vN.tmp.PID, a fresh name in a run directory (reload_run_dir)
W libcore/train/control/reload.c | link(tmp, path) | the request's version claimed by link(2), which never replaces an existing name
W libcore/train/control/reload.c | path_write_atomic(path, "reload answer" | RUN_DIR/reload/vN.applied or .rejected, the run's own files
W libcore/train/control/rundir.c | ftruncate(r->lock_fd, 0) | empties RUN_DIR/lock, the run's own file opened by train_rundir_open_file (O_NOFOLLOW)
W libcore/train/control/rundir.c | path_write_atomic(path, "resolved config" | RUN_DIR/config.ini, the run's own file
W libcore/train/observe/metrics.c | ftruncate(fd, keep) | cuts a torn last record off RUN_DIR/metrics.jsonl, opened O_NOFOLLOW and refused unless regular (fstat)
W libcore/train/observe/metrics.c | ftruncate(r->metrics_fd | cuts a torn record off RUN_DIR/metrics.jsonl, the run's own file (train_rundir_open_file)
W libcore/train/observe/metrics.c | open(path, O_RDWR | O_NOFOLLOW | RUN_DIR/metrics.jsonl, never through a link, refused unless regular
W libcore/train/observe/profile.c | path_write_atomic(path, "profile" | RUN_DIR/profile.json, the run's own file
W libcore/train/observe/profile.c | path_write_atomic(p->shapes_path | profile.shapes: shapes_check (path_output_check) at setup
R apps/chaos/check.c | open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC) | O_NONBLOCK, then refused unless regular (fstat)
R libcore/deploy/deploy_onnx.c | open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC) | nebula-deploy --model: O_NONBLOCK, then refused unless regular (fstat), size-checked before it is read
R libcore/nano/nano_npy.c | open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC) | .npy inputs and data sets: O_NONBLOCK, then refused unless regular (fstat)
R libcore/nano/neb_format.c | open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC) | .neb models: O_NONBLOCK, refused unless regular (fstat), mapped read-only and checked whole
W libcore/nano/neb_format.c | open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644) | nebula-deploy --output: a fresh temporary beside it (O_EXCL, O_NOFOLLOW)
W libcore/nano/neb_format.c | rename(tmp, path) | that temporary, fsync'd, renamed over --output (a rename replaces a link, never writes its target)
W libcore/nano/nano_npy.c | open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644) | nebula-infer --output: a fresh temporary beside it (O_EXCL, O_NOFOLLOW)
W libcore/nano/nano_npy.c | rename(tmp, path) | that temporary renamed over --output once whole
W libcore/deploy/deploy_onnx.c | fdopen(fd, "rb") | a stream over the read-only descriptor opened just above (read site listed)
W libcore/nano/nano_npy.c | fdopen(fd, "rb") | a stream over the read-only descriptor opened just above (read site listed)
W libcore/nano/nano_npy.c | fdopen(fd, "wb") | a stream over the fresh temporary opened just above
W libcore/nano/neb_format.c | fdopen(tfd, "wb") | a stream over the fresh temporary opened just above
W libcore/deploy/deploy_onnx_export.c | mkstemp(tmp) | nebula-deploy export --output: a fresh temporary beside it (mkstemp: O_EXCL)
W libcore/deploy/deploy_onnx_export.c | fdopen(fd, "wb") | that temporary
W libcore/deploy/deploy_onnx_export.c | rename(tmp, path) | that temporary, fsync'd, renamed over --output (a rename replaces a link, never writes its target)
R apps/chaos/launch.c | open(path, O_RDONLY | O_CLOEXEC) | nebula-chaos's own files (rank registry, its run's heartbeat)
R apps/chaos/launch.c | fopen(log, "r") | its own launch logs
R apps/chaos/ranks.c | open(path, O_RDONLY | O_CLOEXEC) | the rank registry it wrote
R apps/chaos/ranks.c | fopen(path, "r") | /proc/PID/status of a rank
R apps/chaos/scenario.c | fopen(x->launches[launch].log, "r") | its own launch logs
R apps/chaos/scenario.c | fopen(log, "r") | its own reference log
R apps/chaos/scenario.c | fopen(rp, "r") | its own run's relaunch file
R apps/chaos/soak.c | fopen(l->log, "r") | its own launch logs
R libcore/base/runtime.c | fopen("/proc/sys/kernel/random/boot_id" | a fixed system file
R libcore/ckpt/ckpt_dir.c | open(path, O_RDONLY | O_CLOEXEC) | fsync of the files the commit protocol just wrote
R libcore/ckpt/ckpt_read.c | H5Fopen(path, H5F_ACC_RDONLY | after the probe above it: path_open_own (auto, the run's own ckpt/), path_open_regular (a path a person named)
R libcore/ckpt/tool/ckpt_diff.c | H5Fopen(path, H5F_ACC_RDONLY | a catalog's file: ckpt_catalog_open probed it (path_open_regular)
R libcore/ckpt/tool/ckpt_inspect.c | H5Fopen(cat->file, H5F_ACC_RDONLY | a catalog's file: ckpt_catalog_open probed it
R libcore/ckpt/tool/ckpt_reshard.c | H5Fopen(cat->file, H5F_ACC_RDONLY | a catalog's file: ckpt_catalog_open probed it
R libcore/data/data_image.c | H5Fopen(d->path, H5F_ACC_RDONLY | after data.c's format sniff through path_open_regular
R libcore/train/control/rundir.c | fopen(path, "r") | /proc/PID/stat of the lock's holder
R libcore/train/control/sched.c | fopen("/proc/meminfo", "r") | a fixed system file
R libcore/train/control/sched.c | fopen(limits[k][0], "r") | the cgroup's memory limit files (fixed names)
R libcore/train/core/report.c | fopen("/proc/self/statm", "r") | a fixed system file
R libcore/train/observe/profile.c | fopen("/proc/meminfo", "r") | a fixed system file
EOF
lint=$($PY - "$tmp/allow.txt" <<'PY'
import glob, re, sys
W = re.compile(r'\brename(at2?)?\(|\bfopen\([^;]*"([wa]|r\+)|\bO_CREAT\b|\bO_WRONLY\b|\bO_RDWR\b|\bjson_dump_file\('
               r'|\bH5Fcreate\(|\bfdopen\(|\bpath_write_atomic\(|(?<![A-Za-z0-9_])link(at)?\(|\bsymlink(at)?\('
               r'|\bf?truncate\(|H5F_ACC_RDWR|\bmkstemp|\bfreopen\(|\bcreat\(')
R = re.compile(r'\bfopen\(|(?<![A-Za-z0-9_.>])open\(|\bH5Fopen\(|\bjson_load_file\(|\bjson_load_fd\(')
# the safe functions themselves (regular files only, never blocking; O_NOFOLLOW in the run
# directory) and directory fds opened to fsync a rename
SAFE = re.compile(r'path_create_regular\(|path_open_regular\(|path_open_own\(|train_rundir_open_file\(|O_DIRECTORY')
allow = []
for l in open(sys.argv[1]):
    head, text, why = (x.strip() for x in l.split(' | ', 2))
    k, f = head.split(' ', 1)
    allow.append([k, f, text, 0])
bad = []
for f in sorted(glob.glob('libcore/**/*.c', recursive=True) + glob.glob('apps/**/*.c', recursive=True)):
    if f == 'libcore/base/path.c':  # the rule itself
        continue
    for n, line in enumerate(open(f), 1):
        code = re.sub(r'/\*.*?(\*/|$)|//.*$', '', line)  # comments aside
        if code.strip().startswith('*') or SAFE.search(code):
            continue
        k = 'W' if W.search(code) else 'R' if R.search(code) else None
        if not k:
            continue
        hit = [a for a in allow if a[0] == k and a[1] == f and a[2] in line]
        for a in hit:
            a[3] += 1
        if not hit:
            bad.append(f"    {f}:{n}: unlisted {'write' if k == 'W' else 'read'} site: {line.strip()[:120]}")
bad += [f"    stale entry (no such line any more): {a[0]} {a[1]} | {a[2]}" for a in allow if not a[3]]
print("\n".join(bad))
sys.exit(1 if bad else 0)
PY
)
rc=$?
check "lint: every write site and every read site not through path_open_* is listed with its reason" test $rc -eq 0
[ $rc -eq 0 ] || echo "$lint"

# --- a run directory with committed checkpoints ----------------------------------------
R=$tmp/R
train1() {  # train1 DIR NP [ARG...]: gpt2-tiny on one fixed synthetic batch, 4 steps
    local dir=$1 np=$2
    shift 2
    timeout -k 5 60 $MPIRUN -np "$np" $TRAIN --config configs/train/gpt2-tiny-licenses.ini --run-dir "$dir" \
        --set data.train=synthetic-fixed --set data.val= --set optim.warmup_steps=0 --set train.steps=4 \
        --set train.threads=1 --set runtime.bind=none --set comm.timeout=20 "$@" >"$dir.log" 2>&1 </dev/null
}
train1 "$R" 1 --set ckpt.every_steps=2
S=$R/ckpt/step_00000004
check "a run directory with committed checkpoints" test -f "$S/COMMITTED" -a -f "$R/metrics.jsonl" -a -f "$R/heartbeat"
sums() { (cd "$R" && find . -type f | sort | xargs md5sum); }
before=$(sums)
for out in metrics.jsonl ckpt/step_00000004/state.h5 config.ini heartbeat profile-shapes control.applied; do
    expect "report --out RUN_DIR/$out: exit 2 naming it" 2 "--out $R/$out:" -- $REPORT "$R" --out "$R/$out"
done
check "... every file of the run directory is as it was (checksums)" test "$(sums)" = "$before"

# --- the trainer's own output: --run-dir ---------------------------------------------------
# a committed checkpoint, a directory inside one, and another run's ckpt/ and tb/ (tb/ not
# there yet): exit 2 naming the run directory and the place, before anything is created
rundir_at() { timeout -k 5 60 $TRAIN --config configs/train/gpt2-tiny-licenses.ini --run-dir "$1" \
    --set data.train=synthetic-fixed --set data.val= --set optim.warmup_steps=0 --set train.steps=1 --set train.threads=1 \
    --set runtime.bind=none </dev/null; }
expect "--run-dir a committed checkpoint: exit 2" 2 "run directory $S is the committed checkpoint" -- rundir_at "$S"
expect "--run-dir inside a committed checkpoint: exit 2" 2 \
    "run directory $S/sub lies inside the committed checkpoint" -- rundir_at "$S/sub"
expect "--run-dir inside another run's ckpt/: exit 2" 2 "run directory $R/ckpt/other lies inside ckpt/ of the run directory" \
    -- rundir_at "$R/ckpt/other"
expect "--run-dir inside another run's tb/ (still to be created): exit 2" 2 \
    "run directory $R/tb/other lies inside tb/ of the run directory" -- rundir_at "$R/tb/other"
check "... nothing created there, every file of the run directory as it was" \
    test ! -e "$S/sub" -a ! -e "$R/ckpt/other" -a ! -e "$R/tb" -a "$(sums)" = "$before"

# --- a device node and a FIFO as outputs -------------------------------------------------
mknod "$tmp/node" c 1 3
mkfifo "$tmp/fifo"
expect "report --out DEVICE: exit 2" 2 "$tmp/node: it is a character device" -- $REPORT "$R" --out "$tmp/node"
expect "convert --to --out DEVICE: exit 2" 2 "$tmp/node: it is a character device" -- \
    $CK convert "$S" --to safetensors --out "$tmp/node"
expect "reshard --out DEVICE (a checkpoint's directory): exit 2" 2 "--out $tmp/node is a character device" -- \
    $CK reshard "$S" --dp 2 --out "$tmp/node"
cp configs/train/gpt2-tiny-licenses.ini "$tmp/old.ini"
expect "migrate-config -o DEVICE: exit 2" 2 "$tmp/node: it is a character device" -- \
    $TRAIN migrate-config "$tmp/old.ini" -o "$tmp/node"
expect "bench --out DEVICE: exit 2 before measuring" 2 "$tmp/node: it is a character device" -- \
    build/bin/nebula-bench comm --max-bytes 1K --rounds 1 --out "$tmp/node"
train1 "$tmp/p0" 1 --set profile.shapes="$tmp/node"
rc=$?
check "profile.shapes = DEVICE: exit 2 (got $rc)" test $rc -eq 2
check "... naming it" grep -q "profile.shapes $tmp/node: it is a character device" "$tmp/p0.log"
check "... the node is still a character device" test -c "$tmp/node"
for np in 1 2; do
    train1 "$tmp/p$np" $np --set profile.shapes="$tmp/fifo"
    rc=$?
    check "profile.shapes = FIFO at $np rank(s): exit 2 at once, not a hang (got $rc)" test $rc -eq 2
    check "... naming the FIFO" grep -q "profile.shapes $tmp/fifo: it is a FIFO" "$tmp/p$np.log"
done
check "... the FIFO is still a FIFO" test -p "$tmp/fifo"
mkdir -p "$tmp/text" && cp /usr/share/common-licenses/GPL-3 "$tmp/text/train.bin"
expect "prepare onto its own input: exit 2 naming it" 2 "it is the input $tmp/text/train.bin" -- \
    $TRAIN prepare "$tmp/text" "$tmp/text/train.bin"
expect "prepare into a new directory inside a committed checkpoint: exit 2" 2 "it would be inside the committed checkpoint" \
    -- $TRAIN prepare "$S/tok/en" "$tmp/text/train.bin"
check "... the directory is not created" test ! -e "$S/tok"

# --- nebula-chaos: its --out checked before OUT/run is removed ----------------------------
mkdir -p "$tmp/co/run" && : >"$tmp/co/run/keep" && mknod "$tmp/co/report.md" c 1 3
expect "nebula-chaos --out with a device as report.md: exit 2" 2 "$tmp/co/report.md: it is a character device" -- \
    build/bin/nebula-chaos run kill-30pct --out "$tmp/co"
check "... OUT/run is left as it was" test -e "$tmp/co/run/keep"
expect "nebula-chaos --out inside a committed checkpoint: exit 2" 2 "it would be inside the committed checkpoint" -- \
    build/bin/nebula-chaos run kill-30pct --out "$S/chaos"
check "... nothing created there" test ! -e "$S/chaos"

# --- a link as a hot-reload request ------------------------------------------------------
printf 'version = 1\noptim.lr = 0.0123456\n# SECRET-7f3a\n' >"$tmp/secret"
L=$tmp/L
mkdir -p "$L/reload" && : >"$L/lock"
ln -s "$tmp/secret" "$L/reload/v000001.req"
train1 "$L" 1
rc=$?
check "a link as reload/v000001.req: the run goes on (exit 0, got $rc)" test $rc -eq 0
check "... refused naming the link" grep -q "reload v1 refused at step .*v000001.req is a symbolic link" "$L.log"
check "... no file of the run directory holds the target's contents" bash -c "! grep -rqs -e SECRET-7f3a -e 0.0123456 '$L'"
check "... the rate stayed as configured" bash -c "! grep -q 'optim.lr .* -> 0.0123456' '$L.log'"
check "... the target is untouched" grep -q SECRET-7f3a "$tmp/secret"

# --- weak spots: /proc files as configs, control without a run, an unwritable -o --------
# (with the keys a run needs on the command line: read as empty, it trained and exited 0)
proc_run() { $TRAIN --config "$1" --model gpt2-tiny --set train.micro_batch=2 --steps 1 --set data.val= \
    --set train.threads=1 --set runtime.bind=none --run-dir "$tmp/proc"; }
expect "--config /proc/self/status: exit 2 (it says 0 bytes and reads text)" 2 "says it holds 0 bytes but reads data" -- \
    proc_run /proc/self/status
ln -s /proc/self/mem "$tmp/mem.ini"
expect "--config LINK -> /proc/self/mem: exit 2" 2 "says it holds 0 bytes" -- proc_run "$tmp/mem.ini"
mkdir -p "$tmp/norun"
expect "control on a directory without a run: exit 2" 2 "is not a run directory" -- \
    $TRAIN control "$tmp/norun" --set optim.lr=1e-3
expect "control --list there: exit 2" 2 "is not a run directory" -- $TRAIN control "$tmp/norun" --list
check "... nothing created there" test -z "$(ls -A "$tmp/norun")"
expect "migrate-config -o into a missing directory: exit 2 naming it" 2 "$tmp/nodir/new.ini" -- \
    $TRAIN migrate-config "$tmp/old.ini" -o "$tmp/nodir/new.ini"
finish
