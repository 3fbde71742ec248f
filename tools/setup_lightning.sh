#!/usr/bin/env bash
# Installs PyTorch Lightning 2.6.6 from PyPI (tools/lightning_requirements.txt, every version pinned)
# into a project-local prefix, .deps/lightning/: the Python side of bench/trainer_vs_lightning, the
# GPU benchmark of volt's Trainer against PyTorch Lightning (also runnable on the CPU), whose worker
# bench/trainer_vs_lightning_worker.py runs under
#   PYTHONPATH=.deps/pytorch2:.deps/lightning /usr/bin/python3
# The prefix holds no torch: it is used together with .deps/pytorch2/ (torch 2.11.0), which this
# script installs first through tools/setup_pytorch2.sh --no-configure when it is missing.
# Idempotent: a prefix installed from the same requirements is kept. Prints the PYTHONPATH last.
set -euo pipefail
cd "$(dirname "$0")/.."

tools/setup_pytorch2.sh --no-configure
tools/pip_install_pinned.sh .deps/lightning tools/lightning_requirements.txt \
  "$(grep -m1 '^pytorch-lightning==' tools/lightning_requirements.txt) (~110 MB)"
echo "PYTHONPATH=$PWD/.deps/pytorch2:$PWD/.deps/lightning"
