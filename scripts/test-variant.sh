#!/usr/bin/env bash
# The single-node durable suite again in a variant of the Redis it runs against
# (tests/support/src/redis_variant.rs): `tls` (TLS only, the certificate checked against a CA
# the tests make), `acl` (as README's ACL user), or `tls,acl`. Run after scripts/test.sh,
# which installs redis-server, redis-cli, openssl and chromium: the same test binaries,
# no rebuild.
#
#   bash scripts/test-variant.sh tls [--no-crash] [extra cargo test arguments]
#
# `--no-crash` leaves out durable/tests/durable_crash.rs (its kill -9 scenarios take ~17 s).
# Each test binary runs under scripts/run-tests.sh's time limit. The same build as
# scripts/test.sh (no -p, no --test: building one package, or some targets only,
# resolves the dev-dependencies' features otherwise and rebuilds every dependency, ~190 s
# on CI's 2 cores); only the suites below run (TICKLESS_RUN_ONLY).
set -euo pipefail
cd "$(dirname "$0")/.."

variant="${1:?usage: scripts/test-variant.sh tls|acl|tls,acl [--no-crash] [cargo test args]}"
shift
suites=(durable durable_big durable_recur durable_counters durable_repair durable_acl durable_resume
        durable_prop durable_tracing durable_merge durable_delivery durable_stop durable_bulk durable_cli
        durable_stream dashboard dashboard_security dashboard_escaping dashboard_due durable_cold api
        api_clients durable_crash)
if [ "${1:-}" = "--no-crash" ]; then
  unset 'suites[-1]'
  shift
fi

# The tls variant's CA is made by the tests in this empty directory, and the client
# trusts what is there (SSL_CERT_DIR, read by rustls-native-certs).
certs="$(mktemp -d)"
trap 'rm -rf "$certs"' EXIT
# Two api_clients tests gain nothing from a variant: schemathesis checks the HTTP layer
# (~30 s), and the cluster test starts a plain cluster whatever the variant says.
skips=(--skip schemathesis --skip on_a_redis_cluster)
case " $* " in
  *" -- "*) args=("$@" "${skips[@]}") ;;
  *) args=("$@" -- "${skips[@]}") ;;
esac
SSL_CERT_DIR="$certs" TICKLESS_TEST_REDIS="$variant" TICKLESS_RUN_ONLY="${suites[*]}" \
  bash scripts/run-tests.sh --all-features "${args[@]}"
