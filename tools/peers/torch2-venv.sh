#!/usr/bin/env bash
# torch2-venv.sh — the PyTorch 2.x peer, installed on demand into its own virtual
# environment outside the repository (never by make deps or make check: the wheel pulls
# about 3 GB of CUDA libraries that a CPU run only loads). Prints the environment's python.
#
#   py=$(tools/peers/torch2-venv.sh)          # installs on first use, then only prints
#   "$py" tools/peers/bench_model_torch.py --model gpt2 ...
#
# TORCH2_VERSION (default 2.15.0) picks the release; NEBULA_PEERS_DIR (default
# ~/.cache/nebula-peers) holds the environments, one per version. An environment counts
# only after its last step wrote the marker `complete`: an interrupted install is
# removed and done again, never used half-made.
set -euo pipefail
version=${TORCH2_VERSION:-2.15.0}
root=${NEBULA_PEERS_DIR:-${HOME:-/tmp}/.cache/nebula-peers}
venv=$root/torch-$version
if [ -f "$venv/complete" ]; then
    echo "$venv/bin/python"
    exit 0
fi
command -v /usr/bin/python3 >/dev/null || { echo "torch2-venv: /usr/bin/python3 is missing" >&2; exit 2; }
mkdir -p "$root"
exec 9>"$root/.lock"
flock 9  # two benchmarks starting at once install once
if [ -f "$venv/complete" ]; then echo "$venv/bin/python"; exit 0; fi
rm -rf "$venv"
echo "torch2-venv: installing torch==$version into $venv (about 3.5 GB, once)" >&2
/usr/bin/python3 -m venv "$venv" >&2
pip=("$venv/bin/pip" install --quiet --disable-pip-version-check)
# with its dependencies: torch imports its CUDA libraries even on a CPU
"${pip[@]}" "torch==$version" >&2
# --no-deps: pip would otherwise replace the torch just installed with another release
"${pip[@]}" --no-deps torchvision pillow >&2
"${pip[@]}" numpy >&2
"$venv/bin/python" -c 'import torch, torchvision; torch.ones(2) @ torch.ones(2)' >&2 ||
    { echo "torch2-venv: torch $version does not import in $venv" >&2; exit 1; }
touch "$venv/complete"
echo "$venv/bin/python"
