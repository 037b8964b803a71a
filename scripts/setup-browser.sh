#!/usr/bin/env bash
# Headless Chromium, for tests/publish/test_dashboard.py (a no-op when installed).
# asv 0.6.6's dashboard JavaScript (jQuery, flot, bootstrap, md5, stupidtable; MIT) needs nothing here:
# it is vendored in eagle_fix/data/asv-js/, and `eagle-fix publish` always points html/ at those copies.
# The dashboard test skips without Chromium only outside CI; with CI=true it fails instead.
set -euo pipefail
cd "$(dirname "$0")/.."
case "${1:-}" in
    "") ;;
    -h | --help) echo "usage: scripts/setup-browser.sh   (installs Debian's chromium for the dashboard test)"; exit 0 ;;
    *) echo "setup-browser: unknown argument '$1'; it takes none (see --help)" >&2; exit 2 ;;
esac
if command -v chromium >/dev/null 2>&1; then
    echo "setup-browser: chromium already installed"
else
    SUDO=""
    [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    export DEBIAN_FRONTEND=noninteractive
    $SUDO apt-get update -q
    $SUDO apt-get install -y -q --no-install-recommends chromium fonts-dejavu-core
fi
echo "setup-browser: $(chromium --version 2>/dev/null | head -1); dashboard JS vendored in eagle_fix/data/asv-js/"
