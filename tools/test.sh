#!/usr/bin/env bash
# The whole test suite from a fresh Debian 12 machine: install, build everything, run CTest.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh
cmake --build build -j2
ctest --test-dir build --output-on-failure -j2 --timeout 900
