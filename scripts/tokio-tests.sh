#!/usr/bin/env bash
# tokio's own time tests, run against tickless: the check behind the README's
# "Switching from tokio" figures.
#
# What it runs. The test files cargo downloaded with the tokio and tokio-util packages
# our Cargo.lock pins (found through `cargo metadata`, nothing of tokio's is committed):
# tokio's tests/time_*.rs (not time_wasm.rs, which is for wasm32 only) and
# tests/rt_time_start_paused.rs, with the support/ module time_panic.rs includes, and
# tokio-util's tests/time_delay_queue.rs. They are copied into a small package generated
# under <target dir>/tokio-tests/pkg (its own [workspace]; our Cargo.lock copied in first)
# and run twice: plain, and with RUSTFLAGS="--cfg tokio_unstable" (which adds tokio's
# alternative timer, `enable_alt_timer()`, to the runtimes time_rt.rs and time_panic.rs
# try, and compiles time_alt.rs).
#
# What is changed: only `use` lines, as someone switching would change them, and nothing
# else (every changed line is written to <target dir>/tokio-tests/changes.diff):
#   use tokio::time::{self, A, B};   ->  use tickless::{self as time, A, B};
#   use tokio::time::X; / ::{...} / ::*  ->  use tickless::X; / ::{...} / ::*
#   use tokio::time;                 ->  use tickless as time;
#   use tokio_util::time::DelayQueue;  ->  use tickless::DelayQueue;
# Paths in test bodies are left alone. tickless re-exports tokio's own `Instant`,
# `Duration`, `pause`, `resume` and `advance`, so a body naming those by their tokio path
# still uses what tickless uses. A body that names anything else of `tokio::time`
# (`tokio::time::sleep(...)`, `tokio::time::Sleep`) is not switched by any use line: such a
# test either does not compile against the switched lines, or runs tokio's timer and
# would pass on tokio's merit. Those tests are left out, by name, in LEFT_OUT below (a
# `#[cfg(any())]` line is put before each, so it is not compiled), and the closing
# summary counts only the tests that ran.
#
# What fails this script: a build error; a test that fails and is not in the
# configuration's DOCUMENTED list (the README's list of differences); a documented
# failure that now passes (the README would be wrong: update both lists); a test binary
# killed by a signal (an abort); a configuration that runs longer than
# TOKIO_TESTS_TIMEOUT seconds once built (600 by default: a hang); a file that ran no
# tests.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)

# Tests left out, one a line: `file::test  reason`. Every one names a tokio::time item
# that tickless does not re-export as the same item, in its body rather than a use line.
LEFT_OUT='
time_interval::stream_with_interval_poll_tick_self_waking  stores tokio::time::interval(..) in a field of the switched Interval type: does not compile
time_interval::stream_with_interval_poll_tick_no_waking  stores tokio::time::interval(..) in a field of the switched Interval type: does not compile
time_sleep::drop_from_waker_drop  passes tokio::time::sleep(..) where its switched `use Sleep` line wants tickless'"'"'s: does not compile
time_sleep::short_sleeps  awaits only tokio::time::sleep: would test tokio'"'"'s timer
time_sleep::multi_long_sleeps  awaits only tokio::time::sleep and sleep_until: would test tokio'"'"'s timer
time_sleep::long_sleeps  awaits only tokio::time::sleep_until: would test tokio'"'"'s timer
time_sleep::reset_after_firing  polls and resets only a tokio::time::sleep: would test tokio'"'"'s timer
time_sleep::issue_5183  selects over two tokio::time::sleep: would test tokio'"'"'s timer
time_sleep::drop_after_reschedule_at_new_scheduled_time  resets and drops only tokio::time::sleep: would test tokio'"'"'s timer
time_sleep::drop_from_wake  drops tokio::time::Sleep from a waker: would test tokio'"'"'s timer
time_alt::sleep  awaits only tokio::time::sleep: would test tokio'"'"'s timer
time_alt::timeout  awaits only tokio::time::timeout: would test tokio'"'"'s timer
time_alt::cancelled_timer_waker_drop_can_register_timer  uses only tokio::time::sleep: would test tokio'"'"'s timer
time_alt::reset_should_stay_on_same_runtime  uses only tokio::time::sleep: would test tokio'"'"'s timer
time_alt::reset_should_stay_on_same_runtime2  uses only tokio::time::sleep: would test tokio'"'"'s timer
'
# Kept on purpose: time_delay_queue::multi_delay_at_start steps the paused clock with
# tokio::time::sleep_until; what it checks is the (switched) DelayQueue's wakes.

# Failures that are documented differences (README, "Switching from tokio"), per
# configuration, one a line: `file::test  reason`.
DOCUMENTED_PLAIN='
time_panic::timeout_panic_caller  expects a panic without a time driver; tickless uses its process-wide timer
time_panic::timeout_at_panic_caller  expects a panic without a time driver; tickless uses its process-wide timer
time_sleep::creating_sleep_outside_of_context  expects a panic outside a runtime; tickless uses its process-wide timer
time_delay_queue::multi_delay_at_start  checks wakes with no item due: tickless'"'"'s fall elsewhere (tokio-util cascades on its own grid)
time_delay_queue::reset_later_after_slot_starts  checks wakes with no item due: tickless'"'"'s queue is woken by 80 ms, its item due at 100
'
DOCUMENTED_UNSTABLE="$DOCUMENTED_PLAIN"

limit=${TOKIO_TESTS_TIMEOUT:-600}

# Wherever cargo puts our output: CARGO_TARGET_DIR, a config's build.target-dir, target/.
target_dir=$(cargo metadata --format-version 1 --no-deps |
  sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')
work="${target_dir:?cargo metadata named no target directory}/tokio-tests"
pkg="$work/pkg"

# The packages the lock file pins, and where cargo unpacked them (downloading if needed).
host=$(rustc -vV | sed -n 's/^host: //p')
metadata=$(cargo metadata --format-version 1 --filter-platform "$host")
src_dir() { # name -> the package's directory
  local version
  version=$(cargo pkgid "$1" | sed 's/.*[@#]//')
  local manifest
  manifest=$(grep -o "\"manifest_path\":\"[^\"]*/$1-$version/Cargo.toml\"" <<<"$metadata" |
    head -n1 | sed 's/^"manifest_path":"//; s/"$//')
  if [ -z "$manifest" ] || [ ! -f "$manifest" ]; then
    echo "tokio-tests: cargo metadata gave no manifest for $1 $version" >&2
    exit 1
  fi
  printf '%s %s\n' "$version" "$(dirname "$manifest")"
}
read -r tokio_version tokio_dir < <(src_dir tokio)
read -r util_version util_dir < <(src_dir tokio-util)

# --- the generated package --------------------------------------------------------------
# Written to a staging directory, then copied over only where it changed, so that a
# second run rebuilds nothing.
gen="$work/gen"
rm -rf "$gen"
mkdir -p "$gen/tests/support" "$gen/src" "$pkg"
: >"$gen/src/lib.rs"
cat >"$gen/Cargo.toml" <<EOF
# Generated by scripts/tokio-tests.sh: tokio's time tests with their use lines switched.
[package]
name = "tickless-tokio-tests"
version = "0.0.0"
edition = "2021"
publish = false

[workspace]

# The copied tests are gated on tokio's own features (#![cfg(feature = "full")]...):
# this package has them, all on, or the files would compile to nothing.
[features]
default = ["full", "rt", "rt-multi-thread", "macros", "time", "test-util", "io-util"]
full = []
rt = []
rt-multi-thread = []
macros = []
time = []
test-util = []
io-util = []

[dev-dependencies]
tickless = { path = "$repo", features = ["test-util"] }
tokio = { version = "=$tokio_version", features = ["full", "test-util"] }
tokio-util = { version = "=$util_version", features = ["time"] }
tokio-test = "0.4"
futures = "0.3"
futures-test = "0.3"  # time_alt.rs
rand = "0.9"          # time_pause.rs (rand 0.9's Rng::random_range)

[lints.rust]
unexpected_cfgs = "allow"

# As in our Cargo.toml, so that dependencies built for our tests are reused.
[profile.dev]
opt-level = 1

[profile.dev.package."*"]
opt-level = 2
EOF
# Our lock file, so the versions are ours; cargo adds what only these tests need.
if [ ! -f "$pkg/Cargo.lock" ] || ! cmp -s Cargo.lock "$work/Cargo.lock.ours"; then
  cp Cargo.lock "$pkg/Cargo.lock"
  cp Cargo.lock "$work/Cargo.lock.ours"
fi

files=()
for f in "$tokio_dir"/tests/time_*.rs "$tokio_dir"/tests/rt_time_start_paused.rs \
  "$util_dir"/tests/time_delay_queue.rs; do
  case "$(basename "$f")" in time_wasm.rs) continue ;; esac
  files+=("$(basename "$f" .rs)")
  sed -E '/^[[:space:]]*use (tokio::time|tokio_util::time)(::|;)/{
      s/use tokio::time;/use tickless as time;/
      s/tokio::time::\{self,/tickless::{self as time,/
      s/tokio(_util)?::time::/tickless::/
    }' "$f" >"$gen/tests/$(basename "$f")"
done
cp "$tokio_dir/tests/support/panic.rs" "$gen/tests/support/panic.rs"

# Every use line of tokio's time API must have been switched.
if grep -nE '^[[:space:]]*use (tokio::time|tokio_util::time)' "$gen"/tests/*.rs; then
  echo "tokio-tests: the use lines above were not switched: extend the sed in $0" >&2
  exit 1
fi

# Leave out the tests in LEFT_OUT: a `#[cfg(any())]` before each one's attributes.
while read -r name _; do
  [ -n "$name" ] || continue
  file="$gen/tests/${name%%::*}.rs"
  test="${name##*::}"
  awk -v test="$test" '
    { line[NR] = $0 }
    END {
      for (i = 1; i <= NR; i++)
        if (line[i] ~ "^[ \t]*(async )?fn " test "[(]") { found++; at = i }
      if (found != 1) exit 3
      while (at > 1 && line[at - 1] ~ /^[ \t]*(#\[|\/\/)/) at--
      for (i = 1; i <= NR; i++) {
        if (i == at) print "#[cfg(any())] // left out by scripts/tokio-tests.sh (LEFT_OUT)"
        print line[i]
      }
    }' "$file" >"$file.new" || {
    echo "tokio-tests: LEFT_OUT names $name, which is not exactly one test there" >&2
    exit 1
  }
  mv "$file.new" "$file"
done <<<"$LEFT_OUT"

# The whole transformation, for anyone to read.
(
  cd "$gen/tests"
  for f in "${files[@]}"; do
    case "$f" in time_delay_queue) orig="$util_dir/tests/$f.rs" ;; *) orig="$tokio_dir/tests/$f.rs" ;; esac
    diff -u --label "tokio's $f.rs" --label "run $f.rs" "$orig" "$f.rs" || true
  done
) >"$work/changes.diff"

(cd "$gen" && find . -type f) | while read -r f; do
  if ! cmp -s "$gen/$f" "$pkg/$f"; then
    mkdir -p "$(dirname "$pkg/$f")"
    cp "$gen/$f" "$pkg/$f"
  fi
done
(cd "$pkg" && find src tests -type f) | while read -r f; do
  [ -e "$gen/$f" ] || rm -f "$pkg/$f"
done

# --- the runs ---------------------------------------------------------------------------
status=0
summary=()

run() { # label, target dir, documented list, RUSTFLAGS
  local label=$1 dir=$2 documented=$3 flags=$4
  local log="$work/$label.log"
  printf '\n--- tokio-tests (%s): cargo test in %s\n' "$label" "$pkg"
  # The build first, untimed (a cold one takes minutes); then the tests, under `timeout`.
  if ! (cd "$pkg" && CARGO_TERM_COLOR=never RUSTFLAGS="$flags" CARGO_TARGET_DIR="$dir" \
    cargo test --tests --no-run) >"$work/$label.build.log" 2>&1; then
    tail -n 40 "$work/$label.build.log"
    printf 'tokio-tests (%s): FAILED to build (see %s)\n' "$label" "$work/$label.build.log"
    summary+=("$label: did not build")
    status=1
    return
  fi
  local rc=0
  (cd "$pkg" && CARGO_TERM_COLOR=never RUSTFLAGS="$flags" CARGO_TARGET_DIR="$dir" \
    timeout --kill-after=10 "$limit" cargo test --tests --no-fail-fast) >"$log" 2>&1 || rc=$?

  local failed=() problems=()
  if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
    problems+=("did not finish in ${limit}s (a hang?): see $log")
  fi
  # A test binary killed by a signal: cargo says `process didn't exit successfully: ... (signal: N, ...)`.
  if grep -q "didn't exit successfully: .*(signal: " "$log"; then
    problems+=("a test binary was killed by a signal (an abort):")
    while IFS= read -r l; do problems+=("  $l"); done < <(grep "didn't exit successfully: .*(signal: " "$log")
  fi
  # Which file each result belongs to, from cargo's `Running tests/<file>.rs (...)` lines.
  local parsed
  parsed=$(awk '
    /^ *Running tests\// { f = $2; sub(/^tests\//, "", f); sub(/\.rs$/, "", f) }
    /^ *Running unittests/ { f = "" }
    /^test .* \.\.\. FAILED$/ && f != "" { print "FAILED " f "::" $2 }
    /^test result: / && f != "" {
      for (i = 1; i <= NF; i++) {
        if ($(i + 1) ~ /^passed;?$/) p = $i
        if ($(i + 1) ~ /^failed;?$/) x = $i
        if ($(i + 1) ~ /^ignored;?$/) g = $i
      }
      print "RESULT " f " " p " " x " " g
    }' "$log")
  while read -r kind name; do
    [ "$kind" = FAILED ] && failed+=("$name")
  done < <(sort <<<"$parsed")
  local passed=0 nfailed=0 ignored=0 f p x g
  for f in "${files[@]}"; do
    p="" x="" g=""
    read -r p x g < <(awk -v f="$f" '$1 == "RESULT" && $2 == f { print $3, $4, $5 }' <<<"$parsed") || true
    if [ -z "${p:-}" ]; then
      # time_alt.rs is tokio_unstable only; every one of its tests is left out besides.
      if [ "$f" != time_alt ]; then problems+=("tests/$f.rs ran no tests (or did not finish)"); fi
      continue
    fi
    passed=$((passed + p)) nfailed=$((nfailed + x)) ignored=$((ignored + g))
    if [ "$f" != time_alt ] && [ $((p + x + g)) -eq 0 ]; then
      problems+=("tests/$f.rs ran no tests: compiled out?")
    fi
  done
  if [ "$rc" -ne 0 ] && [ "${#failed[@]}" -eq 0 ] && [ "${#problems[@]}" -eq 0 ]; then
    problems+=("cargo test failed (exit $rc) with no failed test: a build error? see $log")
    tail -n 30 "$log"
  fi

  local undocumented=() fixed=() documented_failed=0 n
  for n in "${failed[@]}"; do
    if grep -q "^$n " <<<"$documented"; then
      documented_failed=$((documented_failed + 1))
    else
      undocumented+=("$n")
    fi
  done
  while read -r n _; do
    [ -n "$n" ] || continue
    if ! printf '%s\n' "${failed[@]}" | grep -qx "$n"; then fixed+=("$n"); fi
  done <<<"$documented"

  if [ "${#undocumented[@]}" -gt 0 ]; then
    problems+=("failed, and not a documented difference: ${undocumented[*]}")
    for n in "${undocumented[@]}"; do
      # The test's own output, from libtest's `---- <test> stdout ----` section.
      awk -v t="${n##*::}" '
        $0 == "---- " t " stdout ----" { on = 1; print "    " $0; next }
        on && (/^---- / || /^failures:$/) { on = 0 }
        on { print "    " $0 }' "$log"
    done
  fi
  if [ "${#fixed[@]}" -gt 0 ]; then
    problems+=("documented as failing, but did not fail: ${fixed[*]} (update DOCUMENTED_* here and the README)")
  fi

  local line
  line="$label: $passed of $((passed + nfailed)) passed, $nfailed failed"
  if [ "$nfailed" -gt 0 ] && [ "${#undocumented[@]}" -eq 0 ]; then line+=" (all documented)"; fi
  if [ "$ignored" -gt 0 ]; then line+=", $ignored ignored"; fi
  if [ "${#failed[@]}" -gt 0 ]; then line+=": ${failed[*]}"; fi
  summary+=("$line")
  if [ "${#problems[@]}" -gt 0 ]; then
    status=1
    printf 'tokio-tests (%s): FAILED\n' "$label"
    printf '  %s\n' "${problems[@]}"
    echo "  (full output: $log)"
  else
    printf 'tokio-tests (%s): ok\n' "$label"
  fi
}

run plain "$target_dir" "$DOCUMENTED_PLAIN" "${RUSTFLAGS:-}"
run tokio_unstable "$target_dir/unstable" "$DOCUMENTED_UNSTABLE" "${RUSTFLAGS:+$RUSTFLAGS }--cfg tokio_unstable"

left_out=$(grep -c '::' <<<"$LEFT_OUT")
printf "\ntokio's time tests (tokio %s, tokio-util %s; %s left out, see %s):\n" \
  "$tokio_version" "$util_version" "$left_out" "scripts/tokio-tests.sh"
printf '  %s\n' "${summary[@]}"
exit "$status"
