#!/usr/bin/env bash
# Install headless Chromium (Debian package `chromium`) for tests/test_dashboard.py; no-op if present.
# The dashboard test skips without a browser only outside CI; with CI=true it fails instead.
set -euo pipefail
if command -v chromium >/dev/null 2>&1; then
    echo "setup-browser: $(chromium --version 2>/dev/null || echo chromium) already installed"
    exit 0
fi
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends chromium fonts-dejavu-core
echo "setup-browser: $(chromium --version)"
