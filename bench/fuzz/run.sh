#!/usr/bin/env bash
# Fuzzes bigc's input readers with libFuzzer: the program loader (+ plan verifier), the token-file
# reader, the safetensors reader and the MLIR front end (+ the whole compile pipeline). Builds the
# targets with clang-14, AddressSanitizer and UndefinedBehaviorSanitizer (UB aborts) in build-fuzz,
# runs each for SECONDS_PER seconds (default 60) from its corpus (test/fuzz/corpus/<target>), and
# prints executions, coverage and crashes per target. A crash's input is kept in
# $OUT/crashes/<target>/: fix the bug, then copy the input into test/fuzz/regressions/<target>/,
# which `make test` replays.
#
#   bash bench/fuzz/run.sh                 # all four targets, 60 s each
#   SECONDS_PER=600 TARGETS="mlir" bash bench/fuzz/run.sh
#   MINIMIZE=1 bash bench/fuzz/run.sh       # then write the minimised corpus (libFuzzer's -merge=1,
#                                           # cmin) back into test/fuzz/corpus/<target>
# Inputs larger than MAX_LEN bytes (default 65536) are not generated.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
SECONDS_PER=${SECONDS_PER:-60}
TARGETS=${TARGETS:-"program tokens safetensors mlir"}
BUILD=${BUILD:-$ROOT/build-fuzz}
OUT=${OUT:-$BUILD/runs}
JOBS=${JOBS:-$(nproc)}
for p in clang-14 libclang-rt-14-dev libomp-14-dev; do
  dpkg-query -W -f='${Status}' $p 2>/dev/null | grep -q "install ok installed" || {
    SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
    $SUDO apt-get install -y -qq --no-install-recommends $p >&2; }
done
mkdir -p "$BUILD"
SAN="-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer -fsanitize=fuzzer-no-link"
echo "== building the fuzz targets (clang-14, ASan + UBSan) in $BUILD" >&2
cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_C_COMPILER=clang-14 -DCMAKE_CXX_COMPILER=clang++-14 \
  -DCMAKE_C_FLAGS="$SAN" -DCMAKE_CXX_FLAGS="$SAN" -DBIGC_FUZZ=ON -DBIGC_ENABLE_CUDA=OFF \
  > "$BUILD/configure.log" 2>&1 \
  || { tail -30 "$BUILD/configure.log"; exit 1; }
list=""
for t in $TARGETS; do list="$list fuzz_$t"; done
cmake --build "$BUILD" -j "$JOBS" --target $list > "$BUILD/build.log" 2>&1 || { grep -E 'error' -A3 "$BUILD/build.log" | head -40; exit 1; }
mkdir -p "$OUT"
echo "| target | what it feeds | seconds | executions | exec/s | coverage (edges) | corpus | crashes |"
echo "|---|---|---:|---:|---:|---:|---:|---:|"
for t in $TARGETS; do
  case $t in
  program) what="loadProgram's parser + validator + plan verifier";;
  tokens) what="token files (nanoGPT, llm.c) + batch reader";;
  safetensors) what="safetensors reader + dtype conversions";;
  mlir) what="MLIR parser, verifier, whole compile pipeline";;
  esac
  corpus="$OUT/corpus-$t"
  rm -rf "$corpus" "$OUT/crashes/$t"
  mkdir -p "$corpus" "$OUT/crashes/$t"
  cp -r "$ROOT/test/fuzz/corpus/$t/." "$corpus/"
  cp -r "$ROOT/test/fuzz/regressions/$t/." "$corpus/" 2>/dev/null || true
  rm -f "$corpus/README.md"
  ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1 "$BUILD/bin/fuzz_$t" "$corpus" \
    -max_total_time="$SECONDS_PER" -max_len="${MAX_LEN:-65536}" -rss_limit_mb=4096 -timeout=20 \
    -artifact_prefix="$OUT/crashes/$t/" -print_final_stats=1 > "$OUT/$t.log" 2>&1 || true
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$OUT/$t.log" | grep -o '[0-9]*$' || echo 0)
  rate=$(grep -o 'stat::average_exec_per_sec: *[0-9]*' "$OUT/$t.log" | grep -o '[0-9]*$' || echo 0)
  cov=$(grep -o 'cov: [0-9]*' "$OUT/$t.log" | tail -1 | grep -o '[0-9]*' || echo 0)
  ncorp=$(ls "$corpus" | wc -l)
  crashes=$(ls "$OUT/crashes/$t" | wc -l)
  kept=""
  if [ "${MINIMIZE:-0}" = 1 ] && [ "$crashes" = 0 ]; then
    # cmin: the smallest subset of the grown corpus with the same coverage replaces the committed one.
    min="$OUT/min-$t"
    rm -rf "$min" && mkdir -p "$min"
    "$BUILD/bin/fuzz_$t" -merge=1 "$min" "$corpus" > "$OUT/$t.merge.log" 2>&1
    find "$ROOT/test/fuzz/corpus/$t" -type f ! -name README.md -delete
    for f in "$min"/*; do cp "$f" "$ROOT/test/fuzz/corpus/$t/"; done
    kept=" (minimised: $(ls "$min" | wc -l) kept in test/fuzz/corpus/$t)"
  fi
  echo "| $t | $what | $SECONDS_PER | $execs | $rate | $cov | $ncorp$kept | $crashes |"
  if [ "$crashes" != 0 ]; then
    grep -E 'ERROR|SUMMARY|runtime error' "$OUT/$t.log" | head -5 >&2
  fi
done
echo "(logs and crash inputs in $OUT)"
