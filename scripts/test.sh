#!/usr/bin/env bash
# The README's test command: every test of both crates (tickless, tickless-durable), the
# Redis-backed ones included, each test binary under a time limit (scripts/run-tests.sh;
# TICKLESS_TEST_TIMEOUT seconds, 300 by default).
# The durable tests start their own redis-server (on a free 127.0.0.1 port, in a
# temporary directory), and the cluster and TLS ones `redis-cli` (to create a cluster)
# and `openssl` (to make a CA and certificates); this installs them with apt when missing.
# The doc tests of tickless-durable's README (its quick start) run against a server this
# script starts, named by REDIS_URL.
#
#   scripts/test.sh [cargo test build arguments] [-- test binary arguments]
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v redis-server >/dev/null 2>&1 || ! command -v redis-cli >/dev/null 2>&1 \
   || ! command -v openssl >/dev/null 2>&1; then
  if command -v apt-get >/dev/null 2>&1; then
    echo "redis-server, redis-cli or openssl is missing: installing them with apt-get" >&2
    SUDO=""
    if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
    # Network steps under a limit, so that a registry that hangs fails CI, named.
    timeout 600 $SUDO apt-get update
    DEBIAN_FRONTEND=noninteractive timeout 900 $SUDO apt-get install -y redis-server redis-tools openssl
    # The package may start a system-wide server; the tests start their own.
  else
    echo "redis-server, redis-cli or openssl is missing and apt-get is not here: install" \
         "Redis (7.0 or later, built with TLS) and openssl so that they are on PATH," \
         "then run this again" >&2
    exit 1
  fi
fi

# durable/tests/dashboard*.rs drive a real headless browser: Debian's chromium.
if ! command -v chromium >/dev/null 2>&1 && ! command -v chromium-browser >/dev/null 2>&1; then
  if command -v apt-get >/dev/null 2>&1; then
    echo "chromium is missing: installing it with apt-get" >&2
    SUDO=""
    if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
    timeout 600 $SUDO apt-get update
    DEBIAN_FRONTEND=noninteractive timeout 900 $SUDO apt-get install -y chromium
  else
    echo "chromium is missing and apt-get is not here: install Chromium so that" \
         "chromium is on PATH (the dashboard test drives it), then run this again" >&2
    exit 1
  fi
fi

# durable/tests/api_clients.rs drives the HTTP API from Python (standard library) and
# Node (built-in fetch), and runs schemathesis (PyPI) against its OpenAPI document.
if ! command -v python3 >/dev/null 2>&1 || ! python3 -c 'import venv, ensurepip' >/dev/null 2>&1 \
   || ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  if command -v apt-get >/dev/null 2>&1; then
    echo "python3 (with venv), node or npm is missing: installing them with apt-get" >&2
    SUDO=""
    if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
    timeout 600 $SUDO apt-get update
    DEBIAN_FRONTEND=noninteractive timeout 900 $SUDO apt-get install -y python3 python3-venv nodejs npm
  else
    echo "python3 (with venv), node or npm is missing and apt-get is not here: install them," \
         "then run this again" >&2
    exit 1
  fi
fi
# The other languages' libraries the tests drive, installed once under the target
# directory: one Python venv (schemathesis against the OpenAPI document, api_clients.rs;
# the reference standardwebhooks receivers, webhooks.rs; redis-py consumer groups,
# durable_stream_clients.rs) and one Node directory (standardwebhooks; ioredis, whose
# 6.0.0 needs node >= 20). Each variable below, when set, names one already installed.
if [ -z "${TICKLESS_SCHEMATHESIS:-}" ] || [ -z "${TICKLESS_WEBHOOKS_PYTHON:-}" ] \
   || [ -z "${TICKLESS_REDIS_PY:-}" ]; then
  py_env="${CARGO_TARGET_DIR:-target}/python-clients"
  py_pkgs=(schemathesis==4.32.5 standardwebhooks==1.1.0 redis==8.1.0)
  if ! "$py_env/bin/python" -c 'import schemathesis, standardwebhooks, redis' >/dev/null 2>&1; then
    echo "installing ${py_pkgs[*]} in $py_env with pip" >&2
    timeout 300 python3 -m venv "$py_env"
    timeout 600 "$py_env/bin/pip" install --quiet "${py_pkgs[@]}"
  fi
  py_bin="$(cd "$py_env/bin" && pwd)"
  TICKLESS_SCHEMATHESIS="${TICKLESS_SCHEMATHESIS:-$py_bin/schemathesis}"
  TICKLESS_WEBHOOKS_PYTHON="${TICKLESS_WEBHOOKS_PYTHON:-$py_bin/python}"
  TICKLESS_REDIS_PY="${TICKLESS_REDIS_PY:-$py_bin/python}"
fi
export TICKLESS_SCHEMATHESIS TICKLESS_WEBHOOKS_PYTHON TICKLESS_REDIS_PY
if [ -z "${TICKLESS_WEBHOOKS_NODE_PATH:-}" ] || [ -z "${TICKLESS_IOREDIS_DIR:-}" ]; then
  node_dir="${CARGO_TARGET_DIR:-target}/node-clients"
  if [ ! -f "$node_dir/node_modules/standardwebhooks/package.json" ] \
     || [ ! -f "$node_dir/node_modules/ioredis/package.json" ]; then
    echo "installing standardwebhooks and ioredis in $node_dir with npm" >&2
    mkdir -p "$node_dir"
    timeout 600 npm install --silent --no-audit --no-fund --prefix "$node_dir" \
      standardwebhooks@1.1.1 ioredis@6.0.0
  fi
  node_dir="$(cd "$node_dir" && pwd)"
  TICKLESS_WEBHOOKS_NODE_PATH="${TICKLESS_WEBHOOKS_NODE_PATH:-$node_dir/node_modules}"
  TICKLESS_IOREDIS_DIR="${TICKLESS_IOREDIS_DIR:-$node_dir}"
fi
export TICKLESS_WEBHOOKS_NODE_PATH TICKLESS_IOREDIS_DIR

# durable/tests/durable_cold_s3.rs runs the cold tier against a real S3-protocol server:
# s3s-fs, the s3s project's Rust server that keeps objects as files under a directory and
# checks SigV4 signatures. It installs from crates.io like the crate's other tools (moto,
# the other one we tried, needs pip and PyPI). 0.14.1 because 0.17 needs a newer rustc
# than the crate's; `cargo install` builds in CARGO_TARGET_DIR when that is set. The tests
# run the binary TICKLESS_S3S_FS names, else `s3s-fs` on PATH.
if [ -z "${TICKLESS_S3S_FS:-}" ]; then
  if command -v s3s-fs >/dev/null 2>&1; then
    TICKLESS_S3S_FS="$(command -v s3s-fs)"
  else
    s3s_root="${CARGO_HOME:-$HOME/.cargo}"
    if [ ! -x "$s3s_root/bin/s3s-fs" ]; then
      echo "s3s-fs is missing: installing it with cargo install (about 1.5 min)" >&2
      timeout 1200 cargo install s3s-fs@0.14.1 --features binary --locked --root "$s3s_root"
    fi
    TICKLESS_S3S_FS="$s3s_root/bin/s3s-fs"
  fi
fi
export TICKLESS_S3S_FS

# A redis-server for the doc tests, on a free loopback port, stopped on exit.
doc_redis="$(mktemp -d)"
port="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
redis-server --port "$port" --bind 127.0.0.1 --dir "$doc_redis" --save '' --appendonly no \
  --daemonize no >"$doc_redis/log" 2>&1 &
doc_redis_pid=$!
trap 'kill "$doc_redis_pid" 2>/dev/null || true; rm -rf "$doc_redis"' EXIT
for _ in $(seq 100); do
  redis-cli -p "$port" ping >/dev/null 2>&1 && break
  sleep 0.1
done
redis-cli -p "$port" ping >/dev/null || { echo "the doc tests' redis-server did not answer within 10 s:" >&2; cat "$doc_redis/log" >&2; exit 1; }

# Run whole (no arguments), every binary must run and pass at least the tests
# scripts/expected/all.txt names (a CI that cannot pass empty).
if [ $# -eq 0 ] && [ -z "${TICKLESS_EXPECT_WRITE:-}" ]; then
  export TICKLESS_EXPECT="${TICKLESS_EXPECT:-scripts/expected/all.txt}"
fi
REDIS_URL="redis://127.0.0.1:$port/" TICKLESS_DOCTESTS=1 \
  bash scripts/run-tests.sh --all-features "$@"

# Run whole, also the README's 48-hour cold scenario, small (durable/examples/cold_ratings.rs:
# 2,000 trips on the manual clock, ~1 s; it exits non-zero on anything lost, doubled or
# early). `cargo test` built it above.
if [ $# -eq 0 ]; then
  echo "=== example cold_ratings, 2000 trips (README's cold scenario)"
  REDIS_URL="redis://127.0.0.1:$port/" \
    timeout 120 "${CARGO_TARGET_DIR:-target}/debug/examples/cold_ratings" 2000
fi
