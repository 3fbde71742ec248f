#!/usr/bin/env bash
# volt's GPU checks, as one prepared command for the GPU machine (docs/gpu.md): one
# H100/H200, 16 cores, PyTorch 2.x with CUDA in its python3, CMake, ninja and nvcc, no network.
#
#   tools/gpu_check.sh --prepare   here, with network: fetches the Debian packages that machine
#                                  lacks into .gpu/debs and the GPT example's text into .gpu/gpt_text
#                                  (ignored by git; the device call carries .gpu)
#   tools/gpu_check.sh             there: unpacks them, configures volt against that machine's
#                                  LibTorch (torch.utils.cmake_prefix_path), builds with ninja -j16
#                                  and runs every check, each under its own time limit
#   tools/gpu_check.sh --pack      here: copies the programs the checks run, built in build-gpu
#                                  against the same PyTorch wheel as that machine's
#                                  (tools/setup_pytorch2.sh), into .gpu/prebuilt
#   tools/gpu_check.sh --prebuilt  there: runs those programs instead of configuring and building
#                                  (about two minutes of device time saved; check `prebuilt`
#                                  refuses them when that machine's torch is another version)
#
# Results: one file, $OUT/gpu_check.txt (./build-gpu/gpu_check.txt without OUT): the device and
# versions, then a PASS/FAIL/SKIP line per check with its figures; the full output goes to
# gpu_check.log beside it. With the configuration, the main jobs (one file), the benchmarks' tables and
# the image example's log, seven files at most land in $OUT, within the eight a device call brings back. Exit status 0 only when every check passed. Without a CUDA device
# (a rehearsal on a CPU machine) the device checks are skipped, saying so, and the rest runs.
# Options: --only a,b,...  runs only the named checks (see `checks` below); --jobs N (default:
# the machine's cores); --deadline S: the script ends within S seconds of its start (the device
# call's limit less a margin): the benchmark's time limit is what is left when it starts, and its
# tables of the rounds it finished come back even when that limit stops it; --versus-flags "..."
# passes flags to that benchmark (e.g. "--models gpt --rounds 2").
set -uo pipefail
cd "$(dirname "$0")/.."

gpu=.gpu
packages=(
  libboost1.74-dev libboost-program-options1.74-dev libboost-program-options1.74.0  # Boost.Program_options
  libgtest-dev                    # GoogleTest
  libgloo-dev                     # Gloo's headers, which c10d's ProcessGroupGloo.hpp includes
  zlib1g-dev zlib1g               # zlib (checkpoint CRCs)
  libjpeg62-turbo libjpeg62-turbo-dev libjpeg-dev libpng16-16 libpng-dev  # image datasets (data/image)
  dataset-fashion-mnist           # the main job's data
)

prebuilt_programs=(tests/cuda_tests tests/core_tests tests/distributed_worker bench/trainer_vs_lightning
                   bench/data_loader bench/activation_checkpointing bench/checkpoint_stall examples/fashion_mnist
                   examples/make_image_folder examples/image_folder examples/gpt_prepare examples/gpt)
if [[ ${1:-} == --pack ]]; then
  rm -rf "$gpu/prebuilt" && mkdir -p "$gpu/prebuilt"
  for program in "${prebuilt_programs[@]}"; do
    mkdir -p "$gpu/prebuilt/$(dirname "$program")" && cp "build-gpu/$program" "$gpu/prebuilt/$program" || exit 1
  done
  grep -o 'torch-[0-9][^/]*dist-info' <(ls .deps/pytorch2) | sed 's/^torch-//; s/\.dist-info$//' >"$gpu/prebuilt/torch_version" || exit 1
  du -sh "$gpu/prebuilt"
  exit 0
fi

if [[ ${1:-} == --prepare ]]; then
  rm -rf "$gpu/debs" && mkdir -p "$gpu/debs"
  (cd "$gpu/debs" && apt-get download "${packages[@]}") || exit 1
  mkdir -p "$gpu/gpt_text" && cp "$(tools/setup_gpt_text.sh | tail -1)" "$gpu/gpt_text/kjv.txt" || exit 1
  du -sh "$gpu/debs" "$gpu/gpt_text"
  exit 0
fi

only=""
jobs=$(nproc)
deadline=0
prebuilt=0
versus_flags=""
while (($#)); do
  case $1 in
    --only) only=$2; shift 2 ;;
    --jobs) jobs=$2; shift 2 ;;
    --deadline) deadline=$2; shift 2 ;;
    --prebuilt) prebuilt=1; shift ;;
    --versus-flags) versus_flags=$2; shift 2 ;;
    *) echo "gpu_check: unknown argument $1 (see the head of $0)" >&2; exit 2 ;;
  esac
done

build=build-gpu
out=${OUT:-$PWD/$build}
mkdir -p "$out" "$build"
results=$out/gpu_check.txt
: >"$results"
exec > >(tee -a "$out/gpu_check.log") 2>&1

failures=0
record() { echo "$*" | tee -a "$results"; }
wanted() { [[ -z $only || ",$only," == *",$1,"* ]]; }
# check NAME FUNCTION [ARGS...]: runs a check (each bounds its own commands with `timeout`) and
# records PASS, FAIL, or SKIP (status 77, the reason in $build/skip_reason).
check() {
  local name=$1 start=$SECONDS status
  shift
  wanted "$name" || return 0
  echo "=== $name"
  rm -f "$build/skip_reason"
  "$@"
  status=$?
  if ((status == 0)); then
    record "PASS $name ($((SECONDS - start)) s)"
  elif ((status == 77)); then
    record "SKIP $name: $(cat "$build/skip_reason" 2>/dev/null)"
  else
    record "FAIL $name (exit $status$( ((status == 124)) && echo ": over its time limit"), $((SECONDS - start)) s)"
    failures=$((failures + 1))
  fi
}
skip() { echo "$*" >"$build/skip_reason"; return 77; }

python=${VOLT_GPU_PYTHON:-python3}
has_gpu=0
nvidia-smi -L >/dev/null 2>&1 && has_gpu=1

# ---- the machine
{
  echo "# volt GPU check, $(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')$(
    [[ -n $(git status --porcelain --untracked-files=no -- . ':!build-gpu' 2>/dev/null) ]] && echo ' with uncommitted changes')"
  echo "device: $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || echo none)"
  echo "pytorch: $($python -c 'import torch; print(torch.__version__, "cuda", torch.version.cuda, "cudnn", torch.backends.cudnn.version(), "nccl", ".".join(map(str, torch.cuda.nccl.version())) if torch.cuda.is_available() else "-")' 2>&1 | tail -1)"
  echo "toolchain: $(c++ --version | head -1); $(cmake --version | head -1); ninja $(ninja --version 2>/dev/null); $(nvcc --version 2>/dev/null | tail -1)"
  echo "cores: $(nproc)"
} | tee -a "$results"

# ---- what the image lacks, unpacked into .gpu/root (no network there)
sysroot=$PWD/$gpu/root
unpack() {
  ls "$gpu"/debs/*.deb >/dev/null 2>&1 || { echo "no $gpu/debs/*.deb: run tools/gpu_check.sh --prepare where there is a network, and carry $gpu"; return 1; }
  rm -rf "$sysroot" && mkdir -p "$sysroot"
  for deb in "$gpu"/debs/*.deb; do dpkg-deb -x "$deb" "$sysroot" || return 1; done
  # Absolute links (libz.so -> /lib/x86_64-linux-gnu/libz.so.1.2.13) point into the unpacked tree.
  local link target
  while IFS= read -r link; do
    target=$(readlink "$link")
    [[ $target == /* ]] && ln -sfn "$sysroot$target" "$link"
  done < <(find "$sysroot" -type l)
  return 0
}
data_dir=/usr/share/datasets/fashion-mnist
[[ -d $sysroot/usr/share/datasets/fashion-mnist || ! -d $data_dir ]] && data_dir=$sysroot/usr/share/datasets/fashion-mnist

# ---- configure and build against the machine's LibTorch
configure() {
  local torch_cmake
  torch_cmake=$($python -c 'import torch; print(torch.utils.cmake_prefix_path)') || return 1
  # The unpacked packages' multiarch headers first: Debian's jpeglib.h includes the jconfig.h
  # beside its architecture's libraries, which the machine's own (another libjpeg's API) would
  # otherwise stand in for.
  timeout 300 cmake -G Ninja -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DVOLT_CCACHE=OFF -DVOLT_BUILD_BENCHMARKS=ON \
    -DCMAKE_CXX_FLAGS="-isystem $sysroot/usr/include/x86_64-linux-gnu" \
    -DCMAKE_PREFIX_PATH="$torch_cmake;$sysroot/usr" >"$out/configure.txt" 2>&1 || { cat "$out/configure.txt"; return 1; }
  grep '^-- volt:' "$out/configure.txt" | tee -a "$results"
  # On the GPU machine the CUDA build is the point: a CPU-only configuration fails this check.
  ((!has_gpu)) || grep -q 'CUDA and NCCL code paths compiled in' "$out/configure.txt"
}
targets=(cuda_tests core_tests fashion_mnist distributed_worker trainer_vs_lightning data_loader make_image_folder
         image_folder gpt_prepare gpt activation_checkpointing checkpoint_stall)
build_targets() { timeout 900 ninja -C "$build" -j "$jobs" "${targets[@]}"; }

# Programs built elsewhere against the same wheel: the machine's torch/lib stands in for the
# build's .deps/pytorch2 (their RUNPATH), the unpacked .gpu/root for Boost.
use_prebuilt() {
  local version torch_lib
  version=$($python -c 'import torch; print(torch.__version__)') || return 1
  torch_lib=$($python -c 'import os, torch; print(os.path.join(os.path.dirname(torch.__file__), "lib"))') || return 1
  [[ ${version%%+*} == "$(cat "$gpu/prebuilt/torch_version")" ]] ||
    { echo "the programs in $gpu/prebuilt were built against torch $(cat "$gpu/prebuilt/torch_version"), this machine has $version"; return 1; }
  # A call may carry some of them only (the tree that travels is limited): the checks that need
  # one left behind fail saying it is missing.
  for program in "${prebuilt_programs[@]}"; do
    [[ -f $gpu/prebuilt/$program ]] || { echo "prebuilt: $program was not carried"; continue; }
    mkdir -p "$build/$(dirname "$program")" && cp "$gpu/prebuilt/$program" "$build/$program" || return 1
  done
  export LD_LIBRARY_PATH=$torch_lib:$sysroot/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  record "prebuilt programs (torch $version) from $gpu/prebuilt"
}

check unpack unpack
if ((prebuilt)); then
  check prebuilt use_prebuilt
else
  check configure configure
  check build build_targets
fi

# ---- 1. the CUDA tests (tests/cuda, label "cuda"; without a device they skip, naming it) and the
# core tests (one libstdc++ in a program built against this LibTorch, Note [LibTorch's copy of libstdc++])
cuda_tests() {
  if ((prebuilt)); then
    # No CTest files travel with the programs: each suite binary in four gtest shards at once. Their
    # logs stay in $build (the device call brings back 8 files at most); failures go to the log.
    local suite shard pid failed=0 pids=()
    for suite in cuda_tests core_tests; do
      for shard in 0 1 2 3; do
        VOLT_REFERENCE_PYTHON=$python GTEST_TOTAL_SHARDS=4 GTEST_SHARD_INDEX=$shard timeout 600 \
          "$build/tests/$suite" >"$build/${suite}_$shard.log" 2>&1 &
        pids+=($!)
      done
    done
    # 77: every test of the shard skipped itself (tests/support/gtest_main.cpp, ctest's SKIP).
    for pid in "${pids[@]}"; do
      wait "$pid"
      shard=$?
      ((shard == 0 || shard == 77)) || failed=1
    done
    grep -h '^\[  FAILED  \]\|^\[  PASSED  \]\|^\[       OK \]' "$build"/*_tests_?.log
    ((failed == 0)) || { grep -h -B30 '^\[  FAILED  \]' "$build"/*_tests_?.log | head -200; return 1; }
  else
    VOLT_REFERENCE_PYTHON=$python timeout 900 ctest --test-dir "$build" -L "^(cuda|core)$" --output-on-failure --timeout 600 -j 4 ||
      return 1
  fi
  ((has_gpu)) || skip "no CUDA device visible: every CUDA test skipped itself"
}
check cuda_tests cuda_tests

# ---- 2. the main job on cuda:0 in each precision, as docs/main_job.md states its goal (the defaults: 5
# epochs of batch 128, seed 42): test accuracy >= 0.91, time, memory
main_job() {
  # Each precision's output is appended to one file in $OUT (main_jobs.txt): fewer files than a
  # device call brings back.
  local precision=$1 log=$build/main_job_$1.txt
  ((has_gpu)) || { skip "no CUDA device visible"; return; }
  timeout 300 "$build/examples/fashion_mnist" --accelerator cuda --precision "$precision" --max-epochs 5 --data-dir "$data_dir" \
    --default-root-dir "$build/main_job_$precision" --enable-progress-bar false >"$log" 2>&1
  local status=$?
  { echo "==== main job, $precision"; cat "$log"; } >>"$out/main_jobs.txt"
  ((status == 0)) || { tail -20 "$log"; return 1; }
  local accuracy
  accuracy=$(grep -o 'test_acc=[0-9.]*' "$log" | cut -d= -f2)
  record "  main job $precision: test_acc=$accuracy; $(grep '^Fit time' "$log"); $(grep '^Peak GPU memory' "$log")"
  awk -v a="$accuracy" 'BEGIN { exit !(a >= 0.91) }'
}
for precision in 32-true 16-mixed bf16-mixed; do
  check "main_job_$precision" main_job "$precision"
done

# ---- 3. volt against PyTorch Lightning and the raw loops, step for step (bench/trainer_vs_lightning:
# the CNN, the MLP and the GPT decoder; docs/benchmarks.md "volt against PyTorch Lightning"): the tables go to
# trainer_vs_lightning.txt, the goals' verdicts into the results. A missed goal is a figure to
# read, not a failed check; a run that cannot compare (an error, different initial weights) fails.
versus_lightning() {
  ((has_gpu)) || { skip "no CUDA device visible"; return; }
  local table=$out/trainer_vs_lightning.txt partial=$build/trainer_vs_lightning_partial.txt limit=420
  ((deadline > 0)) && limit=$((deadline - SECONDS - 10))
  ((limit > 60)) || { echo "versus_lightning: only ${limit} s left before the deadline"; return 1; }
  echo "versus_lightning: time limit ${limit} s"
  # shellcheck disable=SC2086 # the flags are words
  timeout "$limit" "$build/bench/trainer_vs_lightning" --device cuda --python "$python" --root "$build/trainer_vs_lightning" \
    --partial "$partial" $versus_flags >"$table" || { tail -30 "$table"; cat "$partial" 2>/dev/null; return 1; }
  cat "$table"
  grep -E '^(- |###|bf16|Python side)' "$table" | sed 's/^/  /' | tee -a "$results" >/dev/null
  ! grep -q '| error:' "$table"
}
check versus_lightning versus_lightning

# ---- 4. the data pipeline (docs/data.md): volt's loader against PyTorch's DataLoader on the machine's
# cores (bench/data_loader; the Python side with whichever of torchvision and PIL that machine's
# python3 has), and the image example on cuda:0 with workers and pinned memory, whose time between
# training steps (waiting for data) should be <= 2% of the steps' time.
data_loader_bench() {
  local table=$out/data_loader.txt decoders=""
  $python -c 'import torchvision' 2>/dev/null && decoders=pil,torchvision
  [[ -z $decoders ]] && $python -c 'import PIL' 2>/dev/null && echo "no torchvision: the PyTorch side is left out"
  timeout 400 "$build/bench/data_loader" --tables throughput,memory --workers "1,4,16" --rounds 1 --batches 12 \
    --images 2048 --root "$build/data_loader_images" --python "$python" --decoders "$decoders" >"$table" || { tail -20 "$table"; return 1; }
  cat "$table"
  grep -E '^\| (1|4|16) \|' "$table" | sed 's/^/  /' | tee -a "$results" >/dev/null
}
check data_loader data_loader_bench

image_folder_job() {
  ((has_gpu)) || { skip "no CUDA device visible"; return; }
  local log=$out/image_folder.txt
  timeout 120 "$build/examples/make_image_folder" --data-dir "$data_dir" --out "$build/fashion_mnist_jpeg" >"$log" 2>&1 ||
    { tail -5 "$log"; return 1; }
  timeout 300 "$build/examples/image_folder" --accelerator cuda --data-dir "$build/fashion_mnist_jpeg" --max-epochs 2 \
    --batch-size 256 --num-workers 8 --pin-memory true --enable-progress-bar false \
    --default-root-dir "$build/image_folder_run" >>"$log" 2>&1 || { tail -20 "$log"; return 1; }
  record "  image_folder: $(grep '^Final test metrics' "$log"); $(grep '^Fit time' "$log")"
  local wait
  wait=$(grep -o 'data): [0-9.]*%' "$log" | grep -o '[0-9.]*')
  awk -v w="$wait" 'BEGIN { exit !(w <= 2.0) }'
}
check image_folder image_folder_job

# ---- 5. the GPT example (docs/gpt.md) at the 124M shape, batch 16 x 1024 tokens, bf16-mixed, on cuda:0
# under single_device, ddp and fsdp (one process each): it trains (the validation loss falls from
# ln(50304) = 10.8 below 5) and its tokens per
# second and MFU go into the results (the goal, 463K tokens/s, is a figure to read, not a failed check).
# A second argument passes --cuda-graph (docs/training_loop.md#captured-steps): gpt_captured is
# single_device with its step captured, beside gpt_single_device's eager step in the same run.
gpt_job() {
  local strategy=$1 graph=${2:-} log=$build/gpt_$1${2:+_captured}.txt
  ((has_gpu)) || { skip "no CUDA device visible"; return; }
  [[ -f $build/gpt_tokens/train.bin ]] || timeout 60 "$build/examples/gpt_prepare" --text "$gpu/gpt_text/kjv.txt" \
    --out "$build/gpt_tokens" >"$build/gpt_prepare.txt" 2>&1 || { cat "$build/gpt_prepare.txt"; return 1; }
  timeout 300 "$build/examples/gpt" --data-dir "$build/gpt_tokens" --accelerator cuda --strategy "$strategy" \
    --max-steps 60 --warmup-steps 10 --batch-size 16 --num-workers 4 --pin-memory true --limit-val-batches 4 \
    --enable-progress-bar false --enable-checkpointing false ${graph:+--cuda-graph} \
    --default-root-dir "$build/gpt_run_$strategy${graph:+_captured}" >"$log" 2>&1 || { tail -20 "$log"; return 1; }
  record "  gpt $strategy${graph:+ --cuda-graph}: $(grep '^Final metrics' "$log"); $(grep '^Throughput' "$log")"
  local loss
  loss=$(grep -o 'val_loss=[0-9.]*' "$log" | tail -1 | cut -d= -f2)
  awk -v l="$loss" 'BEGIN { exit !(l != "" && l < 5.0) }'
}
for strategy in single_device ddp fsdp; do
  check "gpt_$strategy" gpt_job "$strategy"
done
check gpt_captured gpt_job single_device captured

# ---- 6. activation checkpointing (docs/activation_checkpointing.md): the GPT decoder at the 124M
# shape with a volt::checkpoint per block against the same model keeping its activations, bf16
# autocast on cuda:0; its table goes into the results (no file of its own: $OUT's count is spent).
activation_checkpointing_bench() {
  ((has_gpu)) || { skip "no CUDA device visible"; return; }
  local table=$build/activation_checkpointing.txt
  timeout 240 "$build/bench/activation_checkpointing" --device cuda --preset gpt2 --layers 12 --batch 8 --steps 5 \
    >"$table" 2>&1 || { tail -20 "$table"; return 1; }
  cat "$table"
  sed 's/^/  /' "$table" | tee -a "$results" >/dev/null
}
check activation_checkpointing activation_checkpointing_bench

# ---- 7. checkpoints in the background from the GPU (docs/checkpoints.md, Note [Snapshots of device
# memory]): a 1.07B-parameter MLP with Adam (a 12.9 GB checkpoint) on cuda:0 in bf16-mixed, saving
# every 290 steps synchronously, in the background, and not at all; the files go to /dev/shm when
# it holds two of them (the stall of the staging, not of that machine's disk), else under build-gpu.
# Training runs on all cores but one, which the writer gets (on all 16, the training thread's
# intra-op work waited for the core the writer held: its steps took 2.2x during the write). Its
# table goes into the results; the goals (a later save's host time <= 1/20 of a synchronous one,
# the steps during the write <= 1.05x) are figures to read, not a failed check.
background_checkpoint_bench() {
  ((has_gpu)) || { skip "no CUDA device visible"; return; }
  local table=$build/checkpoint_stall.txt dir=$build/checkpoint_stall
  (($(df --output=avail -k /dev/shm 2>/dev/null | tail -1) > 30000000)) && dir=/dev/shm/volt_checkpoint_stall
  local limit=420
  ((deadline > 0)) && limit=$((deadline - SECONDS - 5))
  timeout "$limit" "$build/bench/checkpoint_stall" --device cuda --precision bf16-mixed --width 8192 --layers 16 \
    --batch 1024 --steps 600 --every 290 --rounds 1 --threads $(($(nproc) - 1)) --dir "$dir" >"$table" 2>&1 ||
    { tail -20 "$table"; rm -rf "$dir"; return 1; }
  rm -rf "$dir"
  cat "$table"
  echo "  checkpoint_stall (files in $dir):" >>"$results"
  sed 's/^/  /' "$table" | tee -a "$results" >/dev/null
}
check background_checkpoint background_checkpoint_bench

record "failures: $failures"
exit $((failures > 0))
