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
# try, and compiles time_alt.rs). Every test of every file runs; none is left out.
#
# What is changed: paths to tokio's time API, as someone switching would change them,
# and nothing else. Each change stays on its line (no line is added or removed, so a
# line number here is tokio's), and every changed line is written to
# <target dir>/tokio-tests/changes.diff:
#   use tokio::time::{self, A, B};     ->  use tickless::{self as time, A, B};
#   use tokio::time::X; / ::{...} / ::*  ->  use tickless::X; / ::{...} / ::*
#   use tokio::time;                   ->  use tickless as time;
#   use tokio_util::time::DelayQueue;  ->  use tickless::DelayQueue;
#   tokio::time::sleep(..), tokio::time::Sleep, tokio_util::time::X (in test bodies)
#                                      ->  tickless::sleep(..), tickless::Sleep, tickless::X
# Kept as tokio wrote them: comments, and tokio::time::{Instant, Duration, pause, resume,
# advance} in bodies; tickless re-exports those very items, so a body naming them by
# their tokio path uses what tickless uses.
#
# What fails this script: a build error; a test that fails and is not in the
# configuration's DOCUMENTED list (the README's list of differences); a documented test
# that fails somewhere other than its documented place (the test's own thread panicking
# at that file, line and column, or, for a #[should_panic] test, "did not panic" there);
# a documented failure that now passes (the README would be wrong: update both); a test
# binary killed by a signal (an abort); a test binary that runs longer than
# TOKIO_TESTS_TIMEOUT seconds (120 by default: a hang; the binary and its unfinished
# tests are named); a file that ran no tests (time_alt.rs excepted in the plain run,
# where tokio compiles it to nothing); a summary line (below) that the README does not
# quote exactly, or a test the README and the DOCUMENTED lists do not both name.
#
# What it prints last, and the README quotes verbatim, one line per configuration:
#   <configuration>: <n> tests run, <p> passed, <f> failed as documented
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)

# Failures that are documented differences (README, "Switching from tokio"), per
# configuration, one a line: `file::test  where  reason`, `where` being the file, line and
# column the failure must come from (see above; the line is tokio's).
DOCUMENTED_PLAIN='
time_panic::timeout_panic_caller  tests/time_panic.rs:135:37  expects a panic without a time driver; tickless uses its process-wide timer
time_panic::timeout_at_panic_caller  tests/time_panic.rs:151:37  expects a panic without a time driver; tickless uses its process-wide timer
time_sleep::creating_sleep_outside_of_context  tests/time_sleep.rs:187:4  #[should_panic]: expects a panic outside a runtime; tickless uses its process-wide timer
time_delay_queue::multi_delay_at_start  tests/time_delay_queue.rs:119:13  expects the item due at 2 ms to have woken the queue when sleep_until(2 ms) returns; tickless'"'"'s sleep, polled at its deadline, ends at once, the item fires on the next tick
time_delay_queue::reset_later_after_slot_starts  tests/time_delay_queue.rs:560:5  checks wakes with no item due: tickless'"'"'s queue is woken by 80 ms, its item due at 100
'
DOCUMENTED_UNSTABLE="$DOCUMENTED_PLAIN"'
time_alt::reset_should_stay_on_same_runtime  tests/time_alt.rs:215:5  expects its runtime'"'"'s drop to end a 1-hour sleep; tickless completes it at its deadline
time_alt::reset_should_stay_on_same_runtime2  tests/time_alt.rs:271:5  expects its runtime'"'"'s drop to end a 1-hour sleep; tickless completes it at its deadline
'

limit=${TOKIO_TESTS_TIMEOUT:-120}

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
# Generated by scripts/tokio-tests.sh: tokio's time tests with their paths switched.
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
debug = "line-tables-only"

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
  # Use lines first, then the paths in the rest of the code; comments are left alone.
  perl -pe '
    next if m{^\s*//};
    if (/^\s*use (tokio::time|tokio_util::time)(::|;)/) {
      s/use tokio::time;/use tickless as time;/;
      s/tokio::time::\{self,/tickless::{self as time,/;
      s/tokio(_util)?::time::/tickless::/;
    } else {
      s/\btokio::time::(?!(?:Instant|Duration|pause|resume|advance)\b)/tickless::/g;
      s/\btokio_util::time::/tickless::/g;
    }' "$f" >"$gen/tests/$(basename "$f")"
  if [ "$(wc -l <"$f")" -ne "$(wc -l <"$gen/tests/$(basename "$f")")" ]; then
    echo "tokio-tests: $(basename "$f") changed its number of lines: its line numbers would not be tokio's" >&2
    exit 1
  fi
done
cp "$tokio_dir/tests/support/panic.rs" "$gen/tests/support/panic.rs"

# Every use line of tokio's time API must have been switched.
if grep -nE '^[[:space:]]*use (tokio::time|tokio_util::time)' "$gen"/tests/*.rs; then
  echo "tokio-tests: the use lines above were not switched: extend the perl in $0" >&2
  exit 1
fi

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

# Where a failed test failed, from its section of libtest's output (`---- <test> stdout
# ----`): the file and line of the last panic of the test's own thread (the one that ended
# it; libtest names the thread after the test), or of a #[should_panic] test that did not
# panic. Prints `<file>:<line>  <what>`, or nothing.
failure_site() { # test name, log
  awk -v t="$1" '
    $0 == "---- " t " stdout ----" { on = 1; next }
    on && (/^---- .* stdout ----$/ || /^failures:$/) { on = 0 }
    !on { next }
    index($0, "thread '"'"'" t "'"'"' ") == 1 && / panicked at [^ ]+:[0-9]+:[0-9]+:$/ {
      site = $NF; sub(/:$/, "", site); what = "panicked"; want_msg = 1; next
    }
    want_msg { what = "panicked: " $0; want_msg = 0 }
    /^note: test did not panic as expected at [^ ]+:[0-9]+:[0-9]+$/ {
      site = $NF; what = "did not panic (#[should_panic])"
    }
    END { if (site != "") print site "  " what }' "$2"
}

run() { # label, target dir, documented list, RUSTFLAGS
  local label=$1 dir=$2 documented=$3 flags=$4
  local logs="$work/$label"
  rm -rf "$logs"
  mkdir -p "$logs"
  printf '\n--- tokio-tests (%s): %s, each test binary limited to %ss\n' "$label" "$pkg" "$limit"
  # The build first, untimed (a cold one takes minutes); then each binary under `timeout`.
  if ! (cd "$pkg" && CARGO_TERM_COLOR=never RUSTFLAGS="$flags" CARGO_TARGET_DIR="$dir" \
    cargo test --tests --no-run) >"$logs/build.log" 2>&1; then
    tail -n 40 "$logs/build.log"
    printf 'tokio-tests (%s): FAILED to build (see %s)\n' "$label" "$logs/build.log"
    summary+=("$label: did not build")
    status=1
    return
  fi

  local problems=() failed=() undocumented=() misplaced=() incomplete=()
  local run_total=0 passed=0 nfailed=0 ignored=0 f
  for f in "${files[@]}"; do
    # cargo's `Executable tests/<file>.rs (<path>)` line names the binary.
    local bin
    bin=$(sed -n "s|^ *Executable tests/$f\\.rs (\\(.*\\))\$|\\1|p" "$logs/build.log" | head -n1)
    case "$bin" in "") ;; /*) ;; *) bin="$pkg/$bin" ;; esac
    if [ -z "$bin" ] || [ ! -x "$bin" ]; then
      problems+=("tests/$f.rs: cargo named no test binary for it (see $logs/build.log)")
      continue
    fi
    local log="$logs/$f.log" listed rc=0 t0=$SECONDS
    listed=$(cd "$pkg" && timeout --kill-after=10 60 "$bin" --list --format terse |
      sed -n 's/: test$//p') || {
      problems+=("tests/$f.rs: listing its tests failed or did not finish in 60s ($bin --list)")
      continue
    }
    (cd "$pkg" && timeout --kill-after=10 "$limit" "$bin") >"$log" 2>&1 || rc=$?
    local secs=$((SECONDS - t0))

    # Results: `test <name> ... ok|FAILED|ignored` and the closing `test result:` line.
    local p="" x="" g="" done_tests
    read -r p x g < <(awk '/^test result: / {
        for (i = 1; i < NF; i++) {
          if ($(i + 1) ~ /^passed;?$/) p = $i
          if ($(i + 1) ~ /^failed;?$/) x = $i
          if ($(i + 1) ~ /^ignored;?$/) g = $i
        }
        print p, x, g }' "$log") || true
    done_tests=$(sed -nE 's/^test (.*) \.\.\. (ok|FAILED|ignored.*)$/\1/p' "$log" | sed 's/ - should panic$//')
    local n unfinished=()
    while IFS= read -r n; do
      [ -n "$n" ] || continue
      grep -qxF -- "$n" <<<"$done_tests" || unfinished+=("$n")
    done <<<"$listed"

    # A binary that did not finish: its results are incomplete, so its documented
    # failures are not checked. Its tests still running are among those not finished
    # (the rest wait behind them); libtest names those running for over 60 s itself.
    if [ "$rc" -eq 124 ] || { [ "$rc" -eq 137 ] && [ "$secs" -ge "$limit" ]; }; then
      incomplete+=("$f")
      local slow
      slow=$(sed -n 's/^test \(.*\) has been running for over 60 seconds$/\1/p' "$log" | paste -sd ' ')
      problems+=("tests/$f.rs HUNG: killed after ${limit}s (TOKIO_TESTS_TIMEOUT, per test binary)${slow:+; running for over 60 s: $slow}; not finished: ${unfinished[*]:-?} (see $log)")
      printf '  %-22s HUNG: killed after %ss%s\n' "$f" "$secs" "${slow:+, running for over 60 s: $slow}"
      continue
    fi
    if [ "$rc" -gt 128 ]; then
      incomplete+=("$f")
      problems+=("tests/$f.rs was killed by signal $((rc - 128)) (an abort?); not finished: ${unfinished[*]:-?} (see $log)")
      printf '  %-22s killed by signal %s\n' "$f" "$((rc - 128))"
      continue
    fi
    if [ -z "$p" ] || { [ "$rc" -ne 0 ] && [ "$rc" -ne 101 ]; }; then
      incomplete+=("$f")
      problems+=("tests/$f.rs exited with status $rc and no result line (see $log)")
      continue
    fi
    local count=$((p + x + g))
    if [ "$count" -ne "$(grep -c . <<<"$listed" || true)" ] || [ "${#unfinished[@]}" -gt 0 ]; then
      problems+=("tests/$f.rs: $(grep -c . <<<"$listed" || true) tests listed, $count reported (see $log)")
    fi
    if [ "$count" -eq 0 ] && { [ "$f" != time_alt ] || [ "$label" != plain ]; }; then
      problems+=("tests/$f.rs ran no tests: compiled out?")
    fi
    run_total=$((run_total + count)) passed=$((passed + p)) nfailed=$((nfailed + x)) ignored=$((ignored + g))

    local file_failed=() site want
    while IFS= read -r n; do
      [ -n "$n" ] || continue
      file_failed+=("$n")
      failed+=("$f::$n")
      want=$(awk -v n="$f::$n" '$1 == n { print $2 }' <<<"$documented")
      site=$(failure_site "$n" "$log")
      if [ -z "$want" ]; then
        undocumented+=("$f::$n")
        problems+=("$f::$n failed, and is not a documented difference: ${site:-no panic of its own thread found} (see $log)")
      elif [ "${site%%  *}" != "$want" ]; then
        misplaced+=("$f::$n")
        problems+=("$f::$n failed, but not where documented ($want): ${site:-no panic of its own thread found} (see $log)")
      fi
    done < <(sed -nE 's/^test (.*) \.\.\. FAILED$/\1/p' "$log" | sed 's/ - should panic$//' | sort)
    printf '  %-22s %s run, %s passed, %s failed%s (%ss)%s\n' "$f" "$count" "$p" "$x" \
      "$([ "$g" -gt 0 ] && echo ", $g ignored")" "$secs" \
      "$([ "${#file_failed[@]}" -gt 0 ] && echo ": ${file_failed[*]}")"
  done

  local n fixed=()
  while read -r n _; do
    [ -n "$n" ] || continue
    case " ${incomplete[*]} " in *" ${n%%::*} "*) continue ;; esac
    if ! printf '%s\n' "${failed[@]}" | grep -qxF -- "$n"; then fixed+=("$n"); fi
  done <<<"$documented"
  if [ "${#fixed[@]}" -gt 0 ]; then
    problems+=("documented as failing, but did not fail: ${fixed[*]} (update DOCUMENTED_* here and the README)")
  fi
  # The output of each test that failed otherwise than documented.
  for n in "${undocumented[@]}" "${misplaced[@]}"; do
    printf '    ---- %s ----\n' "$n"
    awk -v t="${n#*::}" '
      $0 == "---- " t " stdout ----" { on = 1; next }
      on && (/^---- .* stdout ----$/ || /^failures:$/) { on = 0 }
      on && !/^ +([0-9]+: | +at )/ { print "    " $0 }' "$logs/${n%%::*}.log" | head -n 40
  done

  local line="$label: $run_total tests run, $passed passed, $nfailed failed"
  if [ "$nfailed" -gt 0 ] && [ "${#undocumented[@]}" -eq 0 ] && [ "${#misplaced[@]}" -eq 0 ]; then
    line+=" as documented"
  fi
  if [ "$ignored" -gt 0 ]; then line+=", $ignored ignored"; fi
  if [ "${#incomplete[@]}" -gt 0 ]; then line+=" (not finished: ${incomplete[*]})"; fi
  summary+=("$line")
  if [ "${#problems[@]}" -gt 0 ]; then
    status=1
    printf 'tokio-tests (%s): FAILED\n' "$label"
    printf '  %s\n' "${problems[@]}"
    echo "  (outputs: $logs/<file>.log)"
  else
    printf 'tokio-tests (%s): ok\n' "$label"
  fi
}

run plain "$target_dir" "$DOCUMENTED_PLAIN" "${RUSTFLAGS:-}"
run tokio_unstable "$target_dir/unstable" "$DOCUMENTED_UNSTABLE" "${RUSTFLAGS:+$RUSTFLAGS }--cfg tokio_unstable"

printf "\ntokio's time tests against tickless (tokio %s, tokio-util %s; every test run):\n" \
  "$tokio_version" "$util_version"
printf '  %s\n' "${summary[@]}"

# The README quotes the summary lines (a `text` block in "Switching from tokio"), and
# names every documented failure: both must agree with this run.
quoted=$(sed -nE 's/^[[:space:]]*((plain|tokio_unstable): .*)$/\1/p' README.md)
if [ "$quoted" != "$(printf '%s\n' "${summary[@]}")" ]; then
  status=1
  echo "tokio-tests: README.md does not quote the summary lines above; it has:" >&2
  sed 's/^/  /' <<<"${quoted:-(no plain:/tokio_unstable: line)}" >&2
fi
named=$(grep -oE '`(time_[a-z_]+|rt_time_start_paused)::[a-z0-9_]+`' README.md | tr -d '`' | sort -u)
documented=$(printf '%s\n%s\n' "$DOCUMENTED_PLAIN" "$DOCUMENTED_UNSTABLE" | awk 'NF { print $1 }' | sort -u)
if [ "$named" != "$documented" ]; then
  status=1
  echo "tokio-tests: README.md's list of failing tests and DOCUMENTED_* differ:" >&2
  diff <(echo "$named") <(echo "$documented") | sed -n 's/^</  only in README.md:/p; s/^>/  only in DOCUMENTED_*:/p' >&2
fi
exit "$status"
