#!/usr/bin/env bash
# Installs fairscale 0.4.13 from PyPI (tools/fairscale_requirements.txt, pinned) into a
# project-local prefix, .deps/fairscale/: the oracle the tests compare volt's ddp:shard_optimizer,
# ddp_sharded, slowmo and fsdp with (tests/strategies/fairscale_oracle_test.cpp puts it on the
# reference Python's PYTHONPATH). A few seconds; idempotent: a prefix installed from the same
# requirements is kept.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/pip_install_pinned.sh .deps/fairscale tools/fairscale_requirements.txt \
  "$(grep -m1 '^fairscale==' tools/fairscale_requirements.txt) (~1 MB)" --allow-source
