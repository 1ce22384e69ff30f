#!/usr/bin/env bash
# Builds h2spec v2.2.1 (github.com/summerwind/h2spec, from the Go module
# proxy, pinned with its dependencies in tools/h2spec/go.sum) and prints
# the path of the binary. With arguments, runs it with them instead, e.g.
#   scripts/h2spec.sh -h 127.0.0.1 -p 8080          # an h2c listener
#   scripts/h2spec.sh -h 127.0.0.1 -p 8443 -t -k    # a TLS listener
# The data plane's own conformance test (TestH2Spec in internal/gateway)
# builds it the same way.
set -euo pipefail
cd "$(dirname "$0")/../tools/h2spec"
bin="${H2SPEC_BIN:-$(go env GOPATH)/bin/h2spec-v2.2.1}"
if [ ! -x "$bin" ]; then
  mkdir -p "$(dirname "$bin")"
  go build -o "$bin" github.com/summerwind/h2spec/cmd/h2spec
fi
if [ $# -eq 0 ]; then
  echo "$bin"
else
  exec "$bin" "$@"
fi
