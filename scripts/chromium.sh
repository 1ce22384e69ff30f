#!/usr/bin/env bash
# Makes Debian's chromium available for the operator console's browser
# tests (internal/console), which drive it headless through chromedp.
# Installs the package if the binary is missing and fails loudly if it
# cannot: CI runs the browser tests with GRAYGATE_REQUIRE_BROWSER=1, so a
# missing browser is an error there, never a silent skip. Idempotent; run
# as root (CI runs as root).
set -euo pipefail

if ! command -v chromium >/dev/null 2>&1; then
  export DEBIAN_FRONTEND=noninteractive
  if ! { apt-get update -qq && apt-get install -y -qq --no-install-recommends chromium >/dev/null; }; then
    echo "scripts/chromium.sh: could not install Debian's chromium; the console's browser tests need it" >&2
    exit 1
  fi
fi

# It must also start: render a page headless, with the flags the tests use.
profile=$(mktemp -d)
trap 'rm -rf "$profile"' EXIT
if ! timeout 120 chromium --headless --no-sandbox --disable-gpu --no-first-run --disable-background-networking \
    --disable-component-update --disable-sync --user-data-dir="$profile" \
    --dump-dom 'data:text/html,<p>chromium-ok</p>' 2>/dev/null | grep chromium-ok >/dev/null; then
  echo "scripts/chromium.sh: chromium is installed but does not render a page headless" >&2
  exit 1
fi
chromium --version 2>/dev/null | sed -n 1p
