# model_lib.sh — what the nebula-model tests share (sourced after lib.sh): the binaries and
# the tiny GPT-2 runs whose checkpoints they commit.
M=build/bin/nebula-model
CK=build/bin/nebula-ckpt
TRAIN=build/bin/nebula-train
ROOT=$(pwd)

# train RUN_DIR NP [--set ...]: one run of a one-layer GPT-2 on the licence texts,
# checkpoints every 3 steps; output in RUN_DIR.log
train() {
    local dir=$1 np=$2
    shift 2
    $MPIRUN -np "$np" $TRAIN --config configs/train/gpt2-tiny-licenses.ini --run-dir "$dir" \
        --set data.train="$data/train.bin" --set data.val= --set train.global_batch=4 --set train.seq_len=16 \
        --set model.n_layer=1 --set model.n_embd=16 --set model.n_head=2 --set model.max_seq_len=16 \
        --set optim.schedule=constant --set optim.warmup_steps=0 --set train.threads=1 --set train.log_interval=1 \
        --ckpt-every 3 "$@" >"$dir.log" 2>&1 </dev/null
}

# nm ARGS...: nebula-model from the repository root's path, whatever the current directory
nm() { "$ROOT/$M" "$@"; }

# the commit id (32 hex digits) a name resolves to in repository R: rev R NAME
rev() { nm --repo "$1" show "$2" --json | $PY -c 'import json,sys; print(json.load(sys.stdin)["commit"])'; }
