#!/usr/bin/env bash
# The whole test suite from a fresh Debian 12 machine: install, build volt against both supported
# LibTorch versions and run their suites (what CI runs):
#   build-test/         Debian's LibTorch 1.13 (CPU): every test
#   build-test-torch2/  PyTorch 2.11's LibTorch with CUDA and NCCL (tools/setup_pytorch2.sh):
#                       every test but the example program's (label e2e), on the CPU; the CUDA
#                       tests report "Skipped", naming the missing device (tools/gpu_check.sh
#                       runs them on a GPU machine). No benchmarks in this tree: see below.
# then one build without the examples, volt installed and used by an outside project, volt inside
# an outside project, and the example of a user's own loop.
#
# These trees compile at -O1, not Release's -O3: a translation unit full of torch templates
# compiles in half the time (a library TU 24 -> 12 s, a test TU 44 -> 29 s), which is what lets
# two full builds and two suites fit CI's hour on two cores. The results are the same bits: GCC
# neither reassociates nor contracts floating-point arithmetic at any -O level without
# -ffast-math / FMA targets. build/ (tools/setup.sh, the main job, benchmarks) stays Release.
set -euo pipefail
cd "$(dirname "$0")/.."
# Where the hour goes: each phase's start, in seconds since this script began.
phase() { echo "test.sh: $1 at ${SECONDS} s"; }
phase "setup"
tools/setup.sh
tools/setup_fairscale.sh  # the oracle of the fairscale-style strategies, in both trees' suites
tools/setup_gpt_text.sh >/dev/null  # the GPT example's text (tests/e2e/gpt_cli_test.cpp)
# PyTorch 2.x (~4 GB of wheels) downloads while the first tree compiles: the network and the
# cores work at once.
mkdir -p build-test
tools/setup_pytorch2.sh --no-configure >build-test/setup_pytorch2.log 2>&1 &
pytorch2=$!

ci_flags=(-DCMAKE_BUILD_TYPE=Release "-DCMAKE_CXX_FLAGS_RELEASE=-O1 -DNDEBUG")
# A fresh build tree has no test timings, so CTest would start tests in file order and leave the
# longest for last, one core idle meanwhile: seed it with timings recorded on the 2-core machine
# (tools/ctest_cost_data*.txt: copy a tree's Testing/Temporary/CTestCostData.txt back now and
# then). CTest keeps its own from then on.
build_and_test() {
  local tree=$1 seed=$2 ctest_args=$3 costs=$1/Testing/Temporary/CTestCostData.txt
  shift 3
  local configured
  configured=$(cmake -S . -B "$tree" "${ci_flags[@]}" "$@" 2>&1) || { echo "$configured"; return 1; }
  grep -E '^-- volt:' <<<"$configured" | tee "$tree/volt_summary.txt"
  phase "build $tree"
  cmake --build "$tree" -j2
  phase "tests of $tree"
  [[ -f $costs ]] || { mkdir -p "$(dirname "$costs")" && cp "$seed" "$costs"; }
  # shellcheck disable=SC2086  # ctest_args: words
  ctest --test-dir "$tree" --output-on-failure -j2 $ctest_args
}

build_and_test build-test tools/ctest_cost_data.txt ""
wait "$pytorch2" || { cat build-test/setup_pytorch2.log; exit 1; }
cat build-test/setup_pytorch2.log
# No ccache here: no other tree reuses this LibTorch's objects, and a cache miss costs a third more.
# Two builds and two suites fill most of CI's hour on two cores, so this tree leaves out what
# other runs cover: the benchmarks (~4 min to compile; CI compiles them against 1.13 above, a full
# build against 2.11 as docs/libtorch.md says compiles them too) and the example
# program's end-to-end runs (label e2e, ~1 min; tools/gpu_check.sh runs the main job on 2.11).
build_and_test build-test-torch2 tools/ctest_cost_data_torch2.txt "-LE ^e2e$" -DVOLT_CCACHE=OFF -DVOLT_BUILD_BENCHMARKS=OFF \
  -DCMAKE_PREFIX_PATH="$PWD/.deps/pytorch2/torch/share/cmake"
# The point of that tree: its summary must say CUDA and NCCL were compiled in.
grep -q 'CUDA and NCCL code paths compiled in' build-test-torch2/volt_summary.txt

phase "other builds"
# One non-default build combination must configure and build too: without the example program
# and the benchmarks, the test targets still link the example's library (issue 21.5).
cmake -S . -B build-no-examples "${ci_flags[@]}" -DVOLT_BUILD_EXAMPLES=OFF -DVOLT_BUILD_BENCHMARKS=OFF > /dev/null
cmake --build build-no-examples -j2 --target precision_tests
# volt in someone else's project (issue 19): installed and found with find_package by the starter,
# which then trains one short epoch on two processes; and built inside a project with add_subdirectory
# (which must not build volt's tests, benchmarks or examples, and whose program checks its fit).
# volt's build inside it sits beside build-test/, so that ccache serves it build-test's objects.
rm -rf build-consumer build-subproject-volt
cmake --install build-test --prefix build-consumer/prefix > /dev/null
build-consumer/prefix/bin/volt-ckpt --help > /dev/null  # the checkpoint tool is installed with volt
cmake -S examples/starter -B build-consumer/starter "${ci_flags[@]}" -DCMAKE_PREFIX_PATH="$PWD/build-consumer/prefix" > /dev/null
cmake --build build-consumer/starter -j2
build-consumer/starter/starter --strategy ddp --devices 2 --max-epochs 1 --default-root-dir build-consumer/run \
  --logger none --enable-progress-bar false | tee build-consumer/starter.out
grep -q "^starter: 2 process(es), 1 epoch(s)" build-consumer/starter.out
cmake -S examples/subproject -B build-consumer/subproject "${ci_flags[@]}" -DVOLT_CCACHE=ON \
  -DVOLT_BINARY_DIR="$PWD/build-subproject-volt" > /dev/null
cmake --build build-consumer/subproject -j2 --target subproject
build-consumer/subproject/subproject --logger none --enable-progress-bar false --enable-checkpointing false
# A loop of the user's own (docs/fabric.md): the example CNN through volt::Fabric
# with DDP on two processes and limits, a few seconds.
rm -rf build-own-loop && mkdir -p build-own-loop
build-test/examples/own_loop --strategy ddp --devices 2 --max-epochs 1 --limit-train-batches 20 --limit-val-batches 10 \
  --batch-size 64 --accumulate-grad-batches 2 --default-root-dir build-own-loop | tee build-own-loop/own_loop.out
grep -q "^own_loop: 2 process(es), 10 step(s)" build-own-loop/own_loop.out
test -s build-own-loop/own_loop.ckpt
phase "done"
