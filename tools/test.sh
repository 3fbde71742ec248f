#!/usr/bin/env bash
# The whole test suite from a fresh Debian 12 machine: install, build everything, run CTest.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh
cmake --build build -j2
# A fresh build tree has no test timings, so CTest would start tests in file order and leave the
# longest for last, one core idle meanwhile: seed it with timings recorded on the 2-core machine
# (tools/ctest_cost_data.txt: copy build/'s back now and then). CTest keeps its own from then on.
costs=build/Testing/Temporary/CTestCostData.txt
[[ -f $costs ]] || { mkdir -p "$(dirname "$costs")" && cp tools/ctest_cost_data.txt "$costs"; }
ctest --test-dir build --output-on-failure -j2 --timeout 900
# One non-default build combination must configure and build too: without the example program
# and the benchmarks, the test targets still link the example's library (issue 21.5).
cmake -S . -B build-no-examples -DCMAKE_BUILD_TYPE=Release -DVOLT_BUILD_EXAMPLES=OFF -DVOLT_BUILD_BENCHMARKS=OFF > /dev/null
cmake --build build-no-examples -j2 --target precision_tests checkpoint_tests
# volt in someone else's project (issue 19): installed and found with find_package by the starter,
# which then trains one short epoch on two processes; and built inside a project with add_subdirectory
# (which must not build volt's tests, benchmarks or examples, and whose program checks its fit).
rm -rf build-consumer
cmake --install build --prefix build-consumer/prefix > /dev/null
cmake -S examples/starter -B build-consumer/starter -DCMAKE_PREFIX_PATH="$PWD/build-consumer/prefix" > /dev/null
cmake --build build-consumer/starter -j2
build-consumer/starter/starter --strategy ddp --devices 2 --max-epochs 1 --default-root-dir build-consumer/run \
  --logger none --enable-progress-bar false | tee build-consumer/starter.out
grep -q "^starter: 2 process(es), 1 epoch(s)" build-consumer/starter.out
cmake -S examples/subproject -B build-consumer/subproject -DCMAKE_BUILD_TYPE=Release > /dev/null
cmake --build build-consumer/subproject -j2 --target subproject
build-consumer/subproject/subproject --logger none --enable-progress-bar false --enable-checkpointing false
# A loop of the user's own (issue 20, README "Your own loop"): the example CNN through volt::Fabric
# with DDP on two processes and limits, a few seconds.
rm -rf build-own-loop && mkdir -p build-own-loop
build/examples/own_loop --strategy ddp --devices 2 --max-epochs 1 --limit-train-batches 20 --limit-val-batches 10 \
  --batch-size 64 --accumulate-grad-batches 2 --default-root-dir build-own-loop | tee build-own-loop/own_loop.out
grep -q "^own_loop: 2 process(es), 10 step(s)" build-own-loop/own_loop.out
test -s build-own-loop/own_loop.ckpt
