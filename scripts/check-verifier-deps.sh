#!/usr/bin/env bash
# The offline verifier must not be able to do network I/O, start an async runtime, or
# run an agent: it may not depend (normal dependencies, transitively) on any of these.
set -euo pipefail
cd "$(dirname "$0")/.."
banned='^(knox-monitor|knox-sandbox|knox-dataset|tokio|async-std|smol|mio|hyper|reqwest|ureq|curl|socket2|isahc|surf|h2|rustls|native-tls|openssl)$'
deps=$(cargo tree -p knox-verify -e normal --prefix none --format '{p}' --locked | awk '{print $1}' | sort -u)
bad=$(printf '%s\n' "$deps" | grep -E "$banned" || true)
if [ -n "$bad" ]; then
  echo "knox-verify depends on banned crates:" >&2
  printf '  %s\n' $bad >&2
  exit 1
fi
echo "knox-verify: $(printf '%s\n' "$deps" | wc -l) crates in its dependency graph, none banned"
