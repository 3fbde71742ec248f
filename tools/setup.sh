#!/usr/bin/env bash
# Installs what volt needs on Debian 12 (as root, or through sudo) and configures build/.
# Idempotent: packages already present are not fetched again.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(
  cmake g++ make pkg-config
  ccache                          # a second build tree takes the first one's objects (CMakeLists.txt)
  libtorch-dev libgloo-dev        # LibTorch 1.13 (CPU) and the gloo headers its c10d needs
  libopenblas0-pthread            # without it LibTorch runs on the reference BLAS (~30x slower)
  libboost-program-options-dev zlib1g-dev
  libjpeg-dev libpng-dev          # image datasets: libjpeg-turbo and libpng (data/image)
  googletest libgtest-dev
  dataset-fashion-mnist           # the main job's data (/usr/share/datasets/fashion-mnist)
  python3-torch                   # PyTorch 1.13 for reference comparisons in tests and benchmarks
  python3-protobuf protobuf-compiler python3-crcmod  # independent TensorBoard reader in tests
  openmpi-bin                     # mpirun launch tests
  iproute2                        # network-namespace tests
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  sudo=""
  [[ $(id -u) -ne 0 ]] && sudo="sudo"
  echo "setup: installing ${missing[*]}"
  $sudo apt-get update -q
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
echo "setup: build/ configured"
