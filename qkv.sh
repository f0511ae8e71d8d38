#!/usr/bin/env bash
# qkv's one entry point on a fresh Debian 12 machine (as root):
#   ./qkv.sh demo    install what is missing, build, run the main job (`qkv demo`; arguments
#                    after "demo" are passed on: ./qkv.sh demo --out /tmp/d)
#   ./qkv.sh test    install what is missing, build, run the whole test suite
#   ./qkv.sh setup   only install what is missing: Debian packages, the tests' Python venv
#   ./qkv.sh python  build the Python package into build/venv and run its tests (tests/python)
#   ./qkv.sh fuzz [SECONDS]  build the fuzz targets and run each for SECONDS (default 60) from its
#                    corpus; exits non-zero on a finding (README.md, "Fuzzing")
# Every step skips what is already done: packages present, build trees configured.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"

# Debian packages, with why each is here: README.md, "Dependencies".
packages=(
  g++ cmake ninja-build
  libgtest-dev libbenchmark-dev
  libhwy-dev libcli11-dev nlohmann-json3-dev libpng-dev
  python3 python3-venv python3-dev
  libblis-dev
)
# Only for the test command: clang and LLVM's OpenMP runtime with its Archer tool (libomp-dev,
# which brings libarcher.so) for the ThreadSanitizer build (CMakePresets.json, "tsan"), valgrind,
# which replays the fuzz corpus under memcheck (tests/CMakeLists.txt), and Open MPI, whose mpirun
# runs ring attention's tests on 2 and 4 ranks (qkv::dist), and iproute2, whose ip puts 4 ranks on
# two virtual hosts (network namespaces, tests/dist/across_namespaces.sh).
test_packages=(clang libomp-dev valgrind openmpi-bin libopenmpi-dev iproute2)
# Only for the test and fuzz commands: clang with libFuzzer and the sanitizers' runtimes
# (libclang-rt-14-dev) for the fuzz preset, which links LLVM's OpenMP runtime (libomp-dev) too.
fuzz_packages=(clang libclang-rt-14-dev libomp-dev)

setup() {  # setup [EXTRA PACKAGE...]
  local missing=()
  for package in "${packages[@]}" "$@"; do
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

# build/venv: Python with tests/requirements.txt: safetensors and numpy for
# test_safetensors_python; nanobind, scikit-build-core, pytest and torch for the Python package
# and its tests. The stamp holds the hash of the requirements last installed, so a second run
# costs one import.
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
    install_requirements "$venv" "$requirements"
    echo "$hash" >"$stamp"
  fi
}

# pip's output goes to build/pip.log, and a failed install is tried again twice: a download cut
# short fails one attempt, not the test command (a CI run failed so once, with pip's message lost
# in the middle of the build's output). No pip cache: torch's ~3 GB would lie on disk twice.
pip_log=build/pip.log
install_requirements() {  # install_requirements VENV REQUIREMENTS
  local attempt
  mkdir -p build
  for attempt in 1 2 3; do
    if "$1/bin/python" -m pip install --disable-pip-version-check --no-cache-dir -r "$2" \
      >"$pip_log" 2>&1; then
      return 0
    fi
    echo "qkv.sh: pip install failed (attempt $attempt of 3); the end of $pip_log:"
    tail -n 15 "$pip_log"
    df -h . | tail -n 1
    if [ "$attempt" -lt 3 ]; then sleep 30; fi
  done
  return 1
}

build() {  # build PRESET
  local preset=$1
  if [ ! -f "build/$preset/build.ninja" ]; then
    cmake --preset "$preset"
  fi
  cmake --build --preset "$preset"
}

# The Python package (python/) in build/venv, linked against the release build's libqkv.a
# (installed into build/release-prefix, so qkv is compiled once), its extension built in
# build/python (kept: a rebuild compiles what changed). Re-installed only when the hash of its
# sources and qkv's changes, so a second run costs a hash. Then its tests.
python_tests() {
  local venv=build/venv stamp=build/venv/qkv-package.sha256 hash
  hash=$(find python src include cmake CMakeLists.txt -type f ! -name '*.pyc' -print0 |
    sort -z | xargs -0 sha256sum | sha256sum | cut -d' ' -f1)
  if [ "$(cat "$stamp" 2>/dev/null)" != "$hash" ]; then
    echo "qkv.sh: installing python/ into $venv"
    cmake --install build/release --prefix build/release-prefix >/dev/null
    "$venv/bin/python" -m pip install -q --disable-pip-version-check --no-build-isolation \
      --no-deps ./python -C build-dir="$PWD/build/python" \
      -C cmake.define.QKV_PREFIX="$PWD/build/release-prefix"
    echo "$hash" >"$stamp"
  fi
  "$venv/bin/python" -m pytest -q -p no:cacheprovider tests/python
}

demo() {
  setup
  if [ ! -f build/release/build.ninja ]; then cmake --preset release; fi
  # Only what the demo runs: the test command builds the rest.
  cmake --build --preset release --target qkv_cli
  ./build/release/tools/qkv demo "$@"
}

# The fuzz targets (fuzz/, the fuzz preset), each run from its committed corpus
# (fuzz/corpus/<target>), which libFuzzer only reads: the inputs it adds go to the first
# directory given, build/fuzz/corpus/<target>. Findings go to build/fuzz/findings/<target>/, the
# whole log to build/fuzz/<target>.log. Returns non-zero when a target found something.
fuzz_targets=(attention safetensors)
fuzz_run() {  # fuzz_run TARGET SCRATCH_CORPUS LIBFUZZER_OPTION...
  local target=$1 scratch=$2
  shift 2
  local findings=build/fuzz/findings/$target log=build/fuzz/$target.log
  mkdir -p "$scratch" "$findings"
  local dict=()
  if [ -f "fuzz/$target.dict" ]; then dict=(-dict="fuzz/$target.dict"); fi
  local status=0
  "./build/fuzz/fuzz/${target}_fuzz" "$@" "${dict[@]}" -print_final_stats=1 \
    -artifact_prefix="$findings/" "$scratch" "fuzz/corpus/$target" >"$log" 2>&1 || status=$?
  local runs speed edges
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
  speed=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log")
  edges=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | cut -d' ' -f2)
  echo "qkv.sh: ${target}_fuzz: ${runs:-?} inputs, ${speed:-?} per second, ${edges:-?} edges" \
    "covered, $(find "$scratch" -type f | wc -l) new inputs in $scratch"
  if [ "$status" -ne 0 ]; then
    echo "qkv.sh: ${target}_fuzz FOUND SOMETHING (exit $status); from $log:"
    grep -E "^(attention|safetensors)_fuzz: |^SUMMARY: |^==[0-9]+==ERROR|Test unit written to" \
      "$log" | head -20
    echo "qkv.sh: replay with: ./build/fuzz/fuzz/${target}_fuzz FILE (QKV_FUZZ_VERBOSE=1 prints the case)"
  fi
  return "$status"
}

fuzz() {  # fuzz [SECONDS]
  local seconds=${1:-60}
  setup "${fuzz_packages[@]}"
  build fuzz
  local status=0 target
  for target in "${fuzz_targets[@]}"; do
    fuzz_run "$target" "build/fuzz/corpus/$target" -max_total_time="$seconds" -timeout=60 ||
      status=1
  done
  return "$status"
}

# The smoke run of the test command: each target replays its corpus, then mutates it for a fixed
# number of inputs from a fixed seed (the same inputs on every run of one build), into a scratch
# corpus emptied first. See README.md, "Fuzzing", for what it costs.
fuzz_smoke() {
  build fuzz
  rm -rf build/fuzz/smoke
  local status=0
  fuzz_run attention build/fuzz/smoke/attention -seed=1 -runs=1000 -timeout=60 || status=1
  fuzz_run safetensors build/fuzz/smoke/safetensors -seed=1 -runs=30000 -timeout=60 || status=1
  return "$status"
}

# One line per step of the test command with the seconds since it started, so that a log (CI's
# included) shows where the time went.
phase() {
  echo "qkv.sh: [$((SECONDS - tests_started)) s] $*"
}

run_tests() {
  tests_started=$SECONDS
  setup "${test_packages[@]}" "${fuzz_packages[@]}"
  phase "Debian packages present"
  # pip's downloads (torch and its CUDA libraries, ~3 GB) run while the compiler works.
  setup_python &
  local venv_job=$!
  build release
  phase "release build done"
  if ! wait "$venv_job"; then
    echo "qkv.sh: the Python venv could not be set up; the end of $pip_log:"
    tail -n 30 "$pip_log"
    exit 1
  fi
  phase "Python venv ready"
  ctest --preset release
  phase "release tests done"
  python_tests
  phase "Python package built and tested"
  # The same suite under AddressSanitizer and UndefinedBehaviorSanitizer: bad input must never
  # crash or touch memory it should not.
  build asan
  phase "asan build done"
  ctest --preset asan
  phase "asan tests done"
  # test_concurrency under ThreadSanitizer: many threads calling qkv at once must not race, with
  # each other or among the OpenMP threads of one call. The build has only that test.
  build tsan
  phase "tsan build done"
  ctest --preset tsan
  phase "tsan test done"
  fuzz_smoke
  phase "fuzz smoke done"
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
  python)
    setup
    setup_python
    build release
    python_tests
    ;;
  fuzz)
    shift
    fuzz "$@"
    ;;
  *)
    echo "usage: ./qkv.sh demo | test | setup | python | fuzz [SECONDS]" >&2
    exit 2
    ;;
esac
