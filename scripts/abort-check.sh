#!/usr/bin/env bash
# Checks what tickless does in a `panic = "abort"` build, where no panic can be caught
# (see tests/abort-check/src/main.rs): with time enabled it works; without, the first timer
# aborts the process with tokio's own message, exactly as tokio::time::sleep does.
set -euo pipefail
cd "$(dirname "$0")/.."

cargo build --quiet --profile abort-check -p tickless-abort-check
# Wherever cargo puts its output: CARGO_TARGET_DIR, a config's build.target-dir, or target/.
target_dir=$(cargo metadata --format-version 1 --no-deps |
  sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')
bin="${target_dir:?cargo metadata named no target directory}/abort-check/tickless-abort-check"

timeout 120 "$bin" with-time

set +e
out=$(timeout 120 "$bin" without-time 2>&1)
code=$?
set -e
if [ "$code" -ne 134 ] || ! grep -q "enable_time" <<<"$out"; then
  echo "without-time: expected an abort (exit 134) with tokio's enable_time message;"
  echo "got exit $code and:"
  echo "$out"
  exit 1
fi
echo "without-time: aborted with tokio's message, as tokio::time::sleep does"
