#!/usr/bin/env bash
# Headless Chromium and asv's dashboard JavaScript, for tests/publish/test_dashboard.py (each step a no-op when done).
#  1. Debian's `chromium`.
#  2. asv 0.6.6's dashboard loads jQuery, flot, bootstrap, md5 and stupidtable from CDNs that a
#     test box cannot reach; the same versions come from the npm registry into build/asv-js/, and
#     `eagle_fix.publish.localize.localize_dashboard` points a published html/ at them.
# The dashboard test skips without these only outside CI; with CI=true it fails instead.
set -euo pipefail
cd "$(dirname "$0")/.."
if command -v chromium >/dev/null 2>&1; then
    echo "setup-browser: chromium already installed"
else
    SUDO=""
    [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    export DEBIAN_FRONTEND=noninteractive
    $SUDO apt-get update -q
    $SUDO apt-get install -y -q --no-install-recommends chromium fonts-dejavu-core
fi
JS=build/asv-js
# Keep in step with ASV_CDN in eagle_fix/publish/localize.py (stupidtable 1.0.1 is not on npm; 1.1.3 has its API).
PKGS="jquery@3.3.1 flot@0.8.3 bootstrap@3.1.1 blueimp-md5@2.19.0 flot-orderbars@1.0.0 stupid-table-plugin@1.1.3"
mkdir -p "$JS"
for spec in $PKGS; do
    dir="$JS/$spec"
    [ -f "$dir/package.json" ] && continue
    command -v npm >/dev/null 2>&1 || { echo "setup-browser: npm is needed for $spec (apt-get install npm)" >&2; exit 1; }
    tgz=$(cd "$JS" && npm pack --silent "$spec" | tail -1)
    mkdir -p "$dir" && tar xzf "$JS/$tgz" -C "$dir" --strip-components=1 && rm "$JS/$tgz"
done
echo "setup-browser: $(chromium --version 2>/dev/null | head -1); dashboard JS in $JS/"
