#!/usr/bin/env bash
# Installs PyTorch 2.x with CUDA from PyPI (tools/pytorch2_requirements.txt, every version pinned)
# into a project-local prefix, .deps/pytorch2/, and configures build-torch2/ against its LibTorch.
# Not the system Python: the prefix is a pip --target folder that volt's CMake reads
# (.deps/pytorch2/torch/share/cmake) and the reference tests put first on PYTHONPATH.
# Idempotent: a prefix installed from the same requirements is kept. Prints the prefix's cmake
# directory last. Options: --no-configure (install only).
set -euo pipefail
cd "$(dirname "$0")/.."

prefix=.deps/pytorch2
requirements=tools/pytorch2_requirements.txt
configure=1
[[ ${1:-} == --no-configure ]] && configure=0

tools/pip_install_pinned.sh "$prefix" "$requirements" \
  "$(grep -m1 '^torch==' "$requirements") and its CUDA libraries (~4 GB)"

if ((configure)); then
  # The configuration's summary (LibTorch, CUDA, NCCL) is printed; the rest only on a failure.
  out=$(cmake -S . -B build-torch2 -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$PWD/$prefix/torch/share/cmake" 2>&1) ||
    { echo "$out"; exit 1; }
  grep -E '^-- volt:' <<<"$out" || true
  echo "setup_pytorch2: build-torch2/ configured"
fi
