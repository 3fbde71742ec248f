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
stamp=$prefix/.installed-from
configure=1
[[ ${1:-} == --no-configure ]] && configure=0

if ! cmp -s "$requirements" "$stamp" 2>/dev/null; then
  # pip from the interpreter that has one (pyenv's python3 on the project's machines; Debian's
  # python3-pip otherwise). The wheels are chosen for CPython 3.11, Debian 12's /usr/bin/python3,
  # which runs the reference scripts, whatever interpreter runs pip.
  pip=()
  for python in python3 /usr/bin/python3; do
    if command -v "$python" >/dev/null && "$python" -m pip --version >/dev/null 2>&1; then
      pip=("$python" -m pip)
      break
    fi
  done
  if ((${#pip[@]} == 0)); then
    sudo=""
    [[ $(id -u) -ne 0 ]] && sudo="sudo"
    $sudo apt-get update -q
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends python3-pip
    pip=(/usr/bin/python3 -m pip)
  fi
  echo "setup_pytorch2: installing $(grep -m1 '^torch==' "$requirements") and its CUDA libraries into $prefix (~4 GB)"
  rm -rf "$prefix" "$prefix.partial"
  mkdir -p "$(dirname "$prefix")"
  # --no-deps: the list is complete and pinned; pip's resolver would add triton and setuptools.
  "${pip[@]}" install -q --no-deps --only-binary=:all: --python-version 3.11 --no-warn-script-location \
    --target "$prefix.partial" -r "$requirements"
  cp "$requirements" "$prefix.partial/.installed-from"
  mv "$prefix.partial" "$prefix"
fi

if ((configure)); then
  # The configuration's summary (LibTorch, CUDA, NCCL) is printed; the rest only on a failure.
  out=$(cmake -S . -B build-torch2 -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$PWD/$prefix/torch/share/cmake" 2>&1) ||
    { echo "$out"; exit 1; }
  grep -E '^-- volt:' <<<"$out" || true
  echo "setup_pytorch2: build-torch2/ configured"
fi
