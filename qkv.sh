#!/usr/bin/env bash
# qkv's one entry point on a fresh Debian 12 machine (as root):
#   ./qkv.sh demo    install what is missing, build, run the main job
#   ./qkv.sh test    install what is missing, build, run the whole test suite
#   ./qkv.sh setup   only install the Debian packages that are missing
# Every step skips what is already done: packages present, build trees configured.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"

# Debian packages, with why each is here: README.md, "Dependencies".
packages=(
  g++ cmake ninja-build
  libgtest-dev libbenchmark-dev
  libhwy-dev libcli11-dev nlohmann-json3-dev libpng-dev
  libblis-dev
)

setup() {
  local missing=()
  for package in "${packages[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "ok installed"; then
      missing+=("$package")
    fi
  done
  if ((${#missing[@]} > 0)); then
    echo "qkv.sh: installing ${missing[*]}"
    local sudo=()
    if [ "$(id -u)" -ne 0 ]; then sudo=(sudo); fi
    "${sudo[@]}" apt-get update -q
    DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -q --no-install-recommends \
      "${missing[@]}"
  fi
}

build() {  # build PRESET
  local preset=$1
  if [ ! -f "build/$preset/build.ninja" ]; then
    cmake --preset "$preset"
  fi
  cmake --build --preset "$preset"
}

demo() {
  setup
  build release
  ./build/release/tools/qkv info
  echo
  ./build/release/examples/basic_attention
}

run_tests() {
  setup
  build release
  ctest --preset release
  # The same suite under AddressSanitizer and UndefinedBehaviorSanitizer: bad input must never
  # crash or touch memory it should not.
  build asan
  ctest --preset asan
}

case "${1:-}" in
  demo) demo ;;
  test) run_tests ;;
  setup) setup ;;
  *)
    echo "usage: ./qkv.sh demo | test | setup" >&2
    exit 2
    ;;
esac
