#!/usr/bin/env bash
# Runs without a hang never report one (Note [Diagnosing a hang]): N runs (default 50) of the test
# worker on 2 ranks with a 0.2 s hang check, half under ddp with rank 0 sleeping 0.3 s at every batch
# (its peer waits for it in its collectives, running), half under fsdp. Prints how many runs failed
# and how many printed a hang report; both must be 0. Needs build-test/tests/distributed_worker.
#   tools/hang_check_runs.sh [N] [BUILD_DIR]
set -uo pipefail
cd "$(dirname "$0")/.."
runs=${1:-50}
build=${2:-build-test}
reports=0 failures=0
for ((i = 0; i < runs; ++i)); do
  if ((i % 2 == 0)); then flags="--strategy ddp --slow-rank 0 --slow-ms 300"; else flags="--strategy fsdp"; fi
  dir=$(mktemp -d)
  # shellcheck disable=SC2086 # the flags are words
  output=$("$build/tests/distributed_worker" --mode train --seed 3 --max-epochs 2 --timeout 60 \
    --enable-progress-bar false --enable-model-summary false --enable-checkpointing false --num-sanity-val-steps 0 \
    --batch-size 8 --devices 2 --hang-check 0.2 --default-root-dir "$dir" $flags 2>&1) || failures=$((failures + 1))
  grep -q '): hang: ' <<<"$output" && reports=$((reports + 1))
  rm -rf "$dir"
done
echo "hang_check_runs: $runs runs, $failures failed, $reports reported a hang"
((failures == 0 && reports == 0))
