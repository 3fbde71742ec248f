#!/usr/bin/env bash
# Consecutive 2-rank runs of every DDP comm hook, counting hangs and aborts: volt's hooks (two
# `build/bench/comm_hooks --worker` processes over Gloo on 127.0.0.1), and PyTorch 1.13's own for
# the record (tests/ddp/python/comm_hook_reference.py with one attempt): as DDP launches them
# (--overlap), and, for the PowerSGD hooks, as the parity test's reference runs them (each bucket
# waited before the next is launched). Not part of the test suite.
#
#   tools/comm_hook_stress.sh [--runs 50] [--timeout 30] [--build build] [--volt-only|--torch-only]
#
# Each run: the parity test's MLP (32-48x6-4, three buckets of bucket_cap_mb 0.015), 23 steps
# (PowerSGD from iteration 3), SGD; a run that has not ended after --timeout seconds is a hang
# (killed), one that ends by a signal an abort, one that exits non-zero an error (volt's workers
# also exit 3 when the ranks' parameters differ at the end). Prints one row per hook and side.
set -u
cd "$(dirname "$0")/.."
runs=50 timeout_s=30 build=build sides="volt torch"
while [ $# -gt 0 ]; do
  case "$1" in
    --runs) runs=$2; shift 2 ;;
    --timeout) timeout_s=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    --volt-only) sides="volt"; shift ;;
    --torch-only) sides="torch"; shift ;;
    *) echo "comm_hook_stress: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
program="$build/bench/comm_hooks"
reference=tests/ddp/python/comm_hook_reference.py
widths=32,48,48,48,48,48,48,4 cap=0.015 batch=16 steps=20 warmup=3
[ -x "$program" ] || { echo "comm_hook_stress: build $program first" >&2; exit 2; }
log=$(mktemp -d /tmp/comm_hook_stress.XXXXXX)
echo "comm_hook_stress: $runs runs per row, ${timeout_s}s each at most; logs of failed runs in $log"

free_port() { /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# Prints ok, hang, abort or error for one volt run of hook spec $1.
volt_run() {
  local port out status
  port=$(free_port)
  out="$log/last.txt"
  OMP_NUM_THREADS=1 timeout -k 5 "$timeout_s" bash -c '
    "$0" --worker 1 127.0.0.1 "$1" "$2" "$3" "$4" "$5" "$6" "$7" >/dev/null & other=$!
    "$0" --worker 0 127.0.0.1 "$1" "$2" "$3" "$4" "$5" "$6" "$7" >/dev/null; a=$?
    wait $other; b=$?
    [ $a -ge 128 ] && exit $a; [ $b -ge 128 ] && exit $b; [ $a -ne 0 ] && exit $a; exit $b' \
    "$program" "$port" "$1" "$widths" "$batch" "$cap" "$steps" "$warmup" >"$out" 2>&1
  status=$?
  classify "$status" "$out"
}

# One PyTorch run of hook spec $1 (extra reference flags after it).
torch_run() {
  local dir out status
  dir=$(mktemp -d "$log/torch.XXXXXX")
  out="$log/last.txt"
  timeout -k 5 $((timeout_s + 30)) /usr/bin/python3 "$reference" "$dir" "$1" --attempts 1 \
    --attempt-timeout "$timeout_s" --steps $((steps + warmup)) --widths "$widths" --bucket-cap-mb "$cap" \
    --batch "$batch" "${@:2}" >"$out" 2>&1
  status=$?
  rm -rf "$dir"
  if [ "$status" = 4 ] && grep -q 'exit statuses \[.*-[0-9]' "$out"; then status=134; fi  # a rank died by a signal
  [ "$status" = 3 ] && status=124
  classify "$status" "$out"
}

classify() {
  local kind
  case "$1" in
    0) kind=ok ;;
    124|137) kind=hang ;;
    *) if [ "$1" -ge 128 ]; then kind=abort; else kind=error; fi ;;
  esac
  [ "$kind" = ok ] || cp "$2" "$log/$kind.$RANDOM.txt"
  echo "$kind"
}

printf '| %-78s | %-34s | %4s | %4s | %5s | %6s | %6s |\n' hook side runs ok hangs aborts errors
printf '|%s|%s|%s|%s|%s|%s|%s|\n' "$(printf -- '-%.0s' {1..80})" "$(printf -- '-%.0s' {1..36})" ------ ------ ------- -------- --------
row() {  # label side command...
  local label=$1 side=$2 ok=0 hang=0 abort=0 error=0 i result
  shift 2
  for ((i = 0; i < runs; i++)); do
    result=$("$@")
    case "$result" in ok) ok=$((ok + 1)) ;; hang) hang=$((hang + 1)) ;; abort) abort=$((abort + 1)) ;; *) error=$((error + 1)) ;; esac
  done
  printf '| %-78s | %-34s | %4d | %4d | %5d | %6d | %6d |\n' "$label" "$side" "$runs" "$ok" "$hang" "$abort" "$error"
}

psgd="powersgd:matrix_approximation_rank=1,start_powersgd_iter=3"
batched="batched_powersgd:matrix_approximation_rank=1,start_powersgd_iter=3"
for side in $sides; do
  if [ "$side" = volt ]; then
    for spec in allreduce fp16_compress bf16_compress noop "$psgd" "$batched" "$psgd,comm_wrapper=bf16"; do
      row "$spec" "volt" volt_run "$spec"
    done
  else
    for spec in allreduce fp16_compress noop "$psgd"; do
      row "$spec" "PyTorch, as DDP runs it" torch_run "$spec" --overlap
    done
    row "$batched" "PyTorch, as DDP runs it (bug kept)" torch_run "$batched" --overlap --unpatched
    row "$batched" "PyTorch, as DDP runs it, fixed" torch_run "$batched" --overlap
    row "$psgd" "PyTorch, buckets waited (parity)" torch_run "$psgd"
    row "$batched" "PyTorch, buckets waited, fixed" torch_run "$batched"
  fi
done
