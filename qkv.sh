#!/usr/bin/env bash
# qkv's one entry point on a fresh Debian 12 machine (as root):
#   ./qkv.sh demo    install what is missing, build, run the main job (`qkv demo`; arguments
#                    after "demo" are passed on: ./qkv.sh demo --out /tmp/d)
#   ./qkv.sh test    install what is missing, build, run the whole test suite
#   ./qkv.sh setup   only install what is missing: Debian packages, the tests' Python venv
# Every step skips what is already done: packages present, build trees configured.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"

# Debian packages, with why each is here: README.md, "Dependencies".
packages=(
  g++ cmake ninja-build
  libgtest-dev libbenchmark-dev
  libhwy-dev libcli11-dev nlohmann-json3-dev libpng-dev
  python3 python3-venv
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

# build/venv: Python with tests/requirements.txt (safetensors, numpy) for test_safetensors_python.
# The stamp holds the hash of the requirements last installed, so a second run costs one import.
setup_python() {
  local venv=build/venv requirements=tests/requirements.txt
  local stamp=build/venv/requirements.sha256
  if ! "$venv/bin/python" -c 'import pip' >/dev/null 2>&1; then
    echo "qkv.sh: creating $venv"
    rm -rf "$venv"
    python3 -m venv "$venv"
  fi
  local hash
  hash=$(sha256sum "$requirements" | cut -d' ' -f1)
  if [ "$(cat "$stamp" 2>/dev/null)" != "$hash" ]; then
    echo "qkv.sh: installing $requirements into $venv"
    "$venv/bin/python" -m pip install -q --disable-pip-version-check -r "$requirements"
    echo "$hash" >"$stamp"
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
  if [ ! -f build/release/build.ninja ]; then cmake --preset release; fi
  # Only what the demo runs: the test command builds the rest.
  cmake --build --preset release --target qkv_cli
  ./build/release/tools/qkv demo "$@"
}

run_tests() {
  setup
  setup_python
  build release
  ctest --preset release
  # The same suite under AddressSanitizer and UndefinedBehaviorSanitizer: bad input must never
  # crash or touch memory it should not.
  build asan
  ctest --preset asan
}

case "${1:-}" in
  demo)
    shift
    demo "$@"
    ;;
  test) run_tests ;;
  setup)
    setup
    setup_python
    ;;
  *)
    echo "usage: ./qkv.sh demo | test | setup" >&2
    exit 2
    ;;
esac
