#!/usr/bin/env bash
# Fault-tolerant replicas (docs/fault_tolerance.md): four replica groups of one process each, each
# under its own torchrun with restarts, meeting through volt-lighthouse; replicas 1-3 in turn
# SIGKILL themselves every K steps (up to step 42) and come back; every run trains the same 8
# epochs (64 steps without a failure). For each K, against the same run without failures (the
# baseline, measured first in the same run): the steps replica 0 (never killed) committed of those
# it took part in, how many of replicas 1-3 ended with replica 0's parameters (bit for bit), the
# final training loss and the wall time.
#   bench/fault_tolerant_replicas.sh [BUILD_TREE (build-test)] [STEP_MS (300)] [EPOCHS (8)]
# BUILD_TREE holds tests/distributed_worker and bin/volt-lighthouse (a tree built with the tests).
set -euo pipefail
cd "$(dirname "$0")/.."
tree=${1:-build-test}
step_ms=${2:-300}
epochs=${3:-8}
worker=$tree/tests/distributed_worker
lighthouse=$tree/bin/volt-lighthouse
[[ -x $worker && -x $lighthouse ]] || { echo "build $tree with the tests first (cmake --build $tree)"; exit 2; }
torchrun=(/usr/bin/python3 -m torch.distributed.run)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# The mean squared error over the worker's 64 training samples of the TRAINED parameters in file $1.
final_loss() {
  /usr/bin/python3 - "$1" <<'PY'
import re, sys, torch
g = torch.Generator(); g.manual_seed(7)
x = torch.randn(64, 8, generator=g); w = torch.randn(8, 1, generator=g); y = x @ w + 0.1 * torch.randn(64, 1, generator=g)
p = torch.tensor([float(v) for v in re.findall(r"TRAINED rank=0 params=(\S+)", open(sys.argv[1]).read())[-1].split(",")])
print("%.4f" % float(((x @ p[:8].view(8, 1) + p[8] - y) ** 2).mean()))
PY
}

free_port() { /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# run K: prints "committed taken equal seconds loss kills"; K=0: no failure.
run() {
  local every=$1 dir=$work/k$1 port kills=() r
  mkdir -p "$dir"
  port=$(free_port)
  for r in 1 2 3; do kills[r]=""; done
  if ((every > 0)); then
    local step=$every i=0
    while ((step <= 42)); do
      r=$((i % 3 + 1))
      kills[r]+="${kills[r]:+,}$step"
      step=$((step + every)); i=$((i + 1))
    done
  fi
  "$lighthouse" --replicas 4 --port "$port" --heartbeat-timeout 1 > "$dir/lighthouse.out" 2>&1 &
  local lh=$! pids=() start=$SECONDS
  for r in 0 1 2 3; do
    local extra=()
    [[ -n ${kills[r]:-} ]] && extra=(--kill-at-steps "${kills[r]}")
    "${torchrun[@]}" --no_python --nproc_per_node 1 --max_restarts 8 --monitor_interval 0.2 --redirects 1 --tee 1 \
      --master_port "$(free_port)" "$worker" --mode train --seed 3 --timeout 60 --enable-progress-bar false \
      --enable-model-summary false --enable-checkpointing false --num-sanity-val-steps 0 --logger none \
      --default-root-dir "$dir/r$r" --batch-size 2 --optimizer adam --max-epochs "$epochs" \
      --slow-rank 0 --slow-ms "$step_ms" "${extra[@]}" \
      --fault-tolerance "replicas=4,replica=$r,lighthouse=127.0.0.1:$port" > "$dir/r$r.out" 2>&1 &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || { echo "a replica failed: see below"; cat "$dir"/r*.out; exit 1; }; done
  local seconds=$((SECONDS - start))
  kill "$lh"; wait "$lh" || true
  local line equal=0 mine
  line=$(grep -o 'committed [0-9]* of the [0-9]* steps it took part in' "$dir/r0.out" | tail -1)
  mine=$(grep -o 'TRAINED rank=0 params=[^ ]*' "$dir/r0.out" | tail -1)
  for r in 1 2 3; do
    [[ "$(grep -o 'TRAINED rank=0 params=[^ ]*' "$dir/r$r.out" | tail -1)" == "$mine" ]] && equal=$((equal + 1))
  done
  local kills_done
  kills_done=$(cat "$dir"/r[123].out | grep -c "KILLING" || true)
  awk -v s="$seconds" -v h="$equal" -v l="$(final_loss "$dir/r0.out")" -v k="$kills_done" \
    '{print $2, $5, h, s, l, k}' <<<"$line"
}

echo "fault-tolerant replicas: 4 replicas x 1 process, $epochs epochs (64 samples, batch 2), steps of ~$step_ms ms, torchrun restarts"
printf '| failure every | kills | replica 0 committed / took part | committed | replicas 1-3 equal to 0 at the end | final loss | wall s | wall vs no failure |\n'
printf '|---|---|---|---|---|---|---|---|\n'
read -r c t h base l k < <(run 0)
printf '| never (baseline) | 0 | %d / %d | %.0f%% | %d of 3 | %s | %d | 1.00x |\n' "$c" "$t" \
  "$(awk -v c="$c" -v t="$t" 'BEGIN{print 100*c/t}')" "$h" "$l" "$base"
for every in 12 6 3; do
  read -r c t h s l k < <(run "$every")
  printf '| %d steps | %d | %d / %d | %.0f%% | %d of 3 | %s | %d | %.2fx |\n' "$every" "$k" "$c" "$t" \
    "$(awk -v c="$c" -v t="$t" 'BEGIN{print 100*c/t}')" "$h" "$l" "$s" "$(awk -v s="$s" -v b="$base" 'BEGIN{print s/b}')"
done
