#!/usr/bin/env bash
# The README's test command: every test, the Redis-backed ones included.
# The durable tests start their own redis-server (on a free 127.0.0.1 port, in a
# temporary directory), and the cluster and TLS ones `redis-cli` (to create a cluster)
# and `openssl` (to make a CA and certificates); this installs them with apt when missing.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v redis-server >/dev/null 2>&1 || ! command -v redis-cli >/dev/null 2>&1 \
   || ! command -v openssl >/dev/null 2>&1; then
  if command -v apt-get >/dev/null 2>&1; then
    echo "redis-server, redis-cli or openssl is missing: installing them with apt-get" >&2
    SUDO=""
    if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
    $SUDO apt-get update
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y redis-server redis-tools openssl
    # The package may start a system-wide server; the tests start their own.
  else
    echo "redis-server, redis-cli or openssl is missing and apt-get is not here: install" \
         "Redis (7.0 or later, built with TLS) and openssl so that they are on PATH," \
         "then run this again" >&2
    exit 1
  fi
fi

# tests/dashboard.rs drives a real headless browser: Debian's chromium.
if ! command -v chromium >/dev/null 2>&1 && ! command -v chromium-browser >/dev/null 2>&1; then
  if command -v apt-get >/dev/null 2>&1; then
    echo "chromium is missing: installing it with apt-get" >&2
    SUDO=""
    if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
    $SUDO apt-get update
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y chromium
  else
    echo "chromium is missing and apt-get is not here: install Chromium so that" \
         "chromium is on PATH (the dashboard test drives it), then run this again" >&2
    exit 1
  fi
fi

cargo test --all-features "$@"
