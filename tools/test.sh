#!/usr/bin/env bash
# The whole test suite from a fresh Debian 12 machine: install, build everything, run CTest.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh
cmake --build build -j2
ctest --test-dir build --output-on-failure -j2 --timeout 900
# One non-default build combination must configure and build too: without the example program
# and the benchmarks, the test targets still link the example's library (issue 21.5).
cmake -S . -B build-no-examples -DCMAKE_BUILD_TYPE=Release -DVOLT_BUILD_EXAMPLES=OFF -DVOLT_BUILD_BENCHMARKS=OFF > /dev/null
cmake --build build-no-examples -j2 --target precision_tests checkpoint_tests
