#!/usr/bin/env bash
# Installs torchvision 0.26.0 and Pillow from PyPI (tools/vision_requirements.txt, every version
# pinned) into a project-local prefix, .deps/vision/: the Python side of bench/data_loader, the
# benchmark of volt's data loader against PyTorch's DataLoader on a folder of JPEG files, whose
# worker bench/data_loader_worker.py runs under
#   PYTHONPATH=.deps/pytorch2:.deps/vision /usr/bin/python3
# The prefix holds no torch: it is used together with .deps/pytorch2/ (torch 2.11.0), which this
# script installs first through tools/setup_pytorch2.sh --no-configure when it is missing.
# Idempotent: a prefix installed from the same requirements is kept. Prints the PYTHONPATH last.
set -euo pipefail
cd "$(dirname "$0")/.."

tools/setup_pytorch2.sh --no-configure
tools/pip_install_pinned.sh .deps/vision tools/vision_requirements.txt \
  "$(grep -m1 '^torchvision==' tools/vision_requirements.txt), Pillow and numpy (~120 MB)"
echo "PYTHONPATH=$PWD/.deps/pytorch2:$PWD/.deps/vision"
