#!/usr/bin/env bash
# Builds test binaries with `cargo test --no-run <cargo args>` and runs each one under a
# time limit, in its package's directory as `cargo test` would, so that no test binary can
# hang CI: one that runs past TICKLESS_TEST_TIMEOUT seconds (300 by default) is killed and
# named, and the run fails. Every binary runs even when an earlier one failed; the exit
# status is non-zero if any failed or timed out.
#
#   bash scripts/run-tests.sh [cargo test build arguments] [-- test binary arguments]
#
# With TICKLESS_DOCTESTS=1 the doc tests of the same packages run afterwards
# (`cargo test --doc`, which cannot be built ahead: its limit, three times the other,
# covers compiling each example).
#
# With TICKLESS_EXPECT=FILE, a run cannot pass short: FILE lists, a line each, the least
# number of tests a binary must pass and its name as reported here (`<min> <package>
# <kind> <target>`, or `<min> doc tests`); a binary missing, or passing fewer, fails the
# run (a cfg lost, `required-features` no longer matched, a filter that matches nothing).
# `TICKLESS_EXPECT_WRITE=FILE` writes what this run passed in that form.
#
# With TICKLESS_RUN_ONLY="name ..." only the test binaries of those targets run (all are
# still built: building a subset of targets resolves features differently, for
# dev-dependencies, and would rebuild every dependency).
# Used by scripts/test.sh, scripts/test-variant.sh and .ci/run.
set -euo pipefail
cd "$(dirname "$0")/.."

limit="${TICKLESS_TEST_TIMEOUT:-300}"
cargo_args=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do cargo_args+=("$1"); shift; done
[ "${1:-}" = "--" ] && shift
binary_args=("$@")

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

cargo test --no-run --message-format=json-render-diagnostics ${cargo_args[@]+"${cargo_args[@]}"} >"$work/build.json"
# One line per test binary: its package directory, a name to report, its path.
python3 - "$work/build.json" >"$work/binaries" <<'EOF'
import json, os, sys
seen, ran = set(), set()
for line in open(sys.argv[1]):
    try:
        m = json.loads(line)
    except ValueError:
        continue
    if m.get("reason") != "compiler-artifact" or not m.get("executable"):
        continue
    if not m["profile"]["test"]:
        continue
    exe = m["executable"]
    only = os.environ.get("TICKLESS_RUN_ONLY")
    if exe in seen or (only is not None and m["target"]["name"] not in only.split()):
        continue
    seen.add(exe)
    # "path+file:///dir#name@1.0" or, where the directory is the name, "...#1.0".
    source, _, spec = m["package_id"].partition("#")
    package = spec.split("@")[0] if "@" in spec else source.rstrip("/").split("/")[-1]
    name = "%s %s %s" % (package, "/".join(m["target"]["kind"]), m["target"]["name"])
    print("%s\t%s\t%s" % (os.path.dirname(m["manifest_path"]), name, exe))
    ran.add(m["target"]["name"])
only = os.environ.get("TICKLESS_RUN_ONLY")
missing = sorted(set(only.split()) - ran) if only is not None else []
if missing:
    sys.exit("run-tests: TICKLESS_RUN_ONLY names targets not built: " + " ".join(missing))
EOF

failed=()
ran=0
run_one() { # <limit> <dir> <name> <command...>
  local limit="$1" dir="$2" name="$3"
  shift 3
  printf '\n--- %s (limit %ss)\n' "$name" "$limit"
  local started=$SECONDS status=0
  set +e
  (cd "$dir" && timeout -k 10 "$limit" "$@") 2>&1 | tee "$work/out"
  status=${PIPESTATUS[0]}
  set -e
  # The tests it passed: every "test result" line's count, summed (doc tests print one
  # per crate).
  printf '%s %s\n' "$(grep -Eo '^test result: [A-Za-z]+\. [0-9]+ passed' "$work/out" \
    | awk '{ n += $4 } END { print n + 0 }')" "$name" >>"$work/passed"
  if [ "$status" -eq 124 ] || [ "$status" -eq 137 ]; then
    echo "=== TIMEOUT: $name did not finish within ${limit}s (a hang or a stuck loop): killed" >&2
    failed+=("$name (timed out after ${limit}s)")
  elif [ "$status" -ne 0 ]; then
    failed+=("$name (exit $status)")
  fi
  printf -- '--- %s: %ss\n' "$name" "$((SECONDS - started))"
  ran=$((ran + 1))
}

# A test binary gets CARGO_MANIFEST_DIR as under `cargo test`. Cargo itself must not: the
# build scripts of ring and others rerun when it changes (rerun-if-env-changed), and that
# rebuilt every crate above them, twice per CI run (~170 s).
while IFS=$'\t' read -r dir name exe; do
  run_one "$limit" "$dir" "$name" env CARGO_MANIFEST_DIR="$dir" "$exe" ${binary_args[@]+"${binary_args[@]}"}
done <"$work/binaries"

if [ "${TICKLESS_DOCTESTS:-0}" = "1" ]; then
  run_one "$((3 * limit))" "$(pwd)" "doc tests" cargo test --doc "${cargo_args[@]}"
fi

if [ -n "${TICKLESS_EXPECT_WRITE:-}" ]; then
  sort -k2 "$work/passed" >"$TICKLESS_EXPECT_WRITE"
fi
if [ -n "${TICKLESS_EXPECT:-}" ]; then
  while read -r min name; do
    case "$min" in ''|'#'*) continue ;; esac
    got="$(awk -v name="$name" '{ n = $1; $1 = ""; sub(/^ /, ""); if ($0 == name) print n }' "$work/passed")"
    if [ -z "$got" ]; then
      failed+=("$name: expected (at least $min tests, $TICKLESS_EXPECT), never ran")
    elif [ "$got" -lt "$min" ]; then
      failed+=("$name: $got tests passed, at least $min expected ($TICKLESS_EXPECT)")
    fi
  done <"$TICKLESS_EXPECT"
fi
if [ "$ran" -eq 0 ]; then
  echo "run-tests: no test binary was built for: cargo test ${cargo_args[*]}" >&2
  exit 1
fi
if [ ${#failed[@]} -gt 0 ]; then
  echo "" >&2
  echo "run-tests: ${#failed[@]} failures ($ran test runs):" >&2
  printf '  %s\n' "${failed[@]}" >&2
  exit 1
fi
echo ""
echo "run-tests: all $ran test runs passed"
