#!/usr/bin/env bash
# Miri over the tests that reach the timer crate's `unsafe` code: the purgatory's
# (`arc_from_ptr` in its checks, the condition's cell in `op.rs`; src/sync.rs's own waker
# vtable is loom's only), and the shard owner's log (its slots' and reserve's cells,
# src/driver/owner.rs: the lib's `driver::owner::tests`, an owner and a foreign thread
# with the owner's inserts and cancels, timers moved away and back, an owner's thread
# exiting). tests/purgatory.rs (threshold waits included) and
# tests/purgatory_races.rs run whole, their large counts cut under `cfg(miri)`;
# tests/purgatory_prop.rs (proptest: thousands of cases) is left to the native runs.
# Installs nightly's miri component when it is missing.
#
#   scripts/miri.sh
set -euo pipefail
cd "$(dirname "$0")/.."

if ! cargo +nightly miri --version >/dev/null 2>&1; then
  echo "nightly's miri is missing: installing it with rustup" >&2
  timeout 900 rustup toolchain install nightly --profile minimal --component miri,rust-src
fi
timeout 600 cargo +nightly miri setup

# Isolation off: the tests' runtimes and watchdogs read the real clock.
export MIRIFLAGS="${MIRIFLAGS:--Zmiri-disable-isolation}"
timeout 1500 cargo +nightly miri test -p tickless --test purgatory --test purgatory_races
timeout 600 cargo +nightly miri test -p tickless --lib -- driver::owner::
