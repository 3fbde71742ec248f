#!/usr/bin/env bash
# Installs a pinned requirements file into a project-local prefix (pip --target), for the setup
# scripts of Python packages volt's tests and benchmarks use (tools/setup_pytorch2.sh,
# tools/setup_lightning.sh):
#
#   tools/pip_install_pinned.sh PREFIX REQUIREMENTS DESCRIPTION [--allow-source]
#
# --allow-source: a package PyPI has only as source (fairscale 0.4.13) is built into a wheel by pip
# (pure Python: setuptools, fetched by pip for the build); without it only wheels are taken.
#
# --no-deps: every list is complete and pinned (pip's resolver would add what the list leaves out
# on purpose). The wheels are chosen for CPython 3.11, Debian 12's /usr/bin/python3, which runs
# the reference scripts and workers, whatever interpreter runs pip. Idempotent: a prefix installed
# from the same requirements (its stamp, PREFIX/.installed-from) is kept; a new one is installed
# beside it and moved in place only when complete.
set -euo pipefail
cd "$(dirname "$0")/.."
prefix=$1 requirements=$2 description=$3
binary_only=(--only-binary=:all:)
[[ ${4:-} == --allow-source ]] && binary_only=()
cmp -s "$requirements" "$prefix/.installed-from" 2>/dev/null && exit 0

# pip from the interpreter that has one (pyenv's python3 on the project's machines; Debian's
# python3-pip otherwise).
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
echo "$(basename "$prefix"): installing $description into $prefix"
rm -rf "$prefix" "$prefix.partial"
mkdir -p "$(dirname "$prefix")"
"${pip[@]}" install -q --no-deps "${binary_only[@]}" --python-version 3.11 --no-warn-script-location \
  --target "$prefix.partial" -r "$requirements"
cp "$requirements" "$prefix.partial/.installed-from"
mv "$prefix.partial" "$prefix"
