#!/usr/bin/env bash
# The main job from a fresh Debian 12 machine: install, build, train the Fashion-MNIST CNN and
# print its test metrics. Extra arguments go to the program (e.g. --precision bf16-mixed).
set -euo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh
cmake --build build -j2 --target fashion_mnist
build/examples/fashion_mnist "$@"
