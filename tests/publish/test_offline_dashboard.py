"""The dashboard needs no CDN: asv's pages are pointed at the JavaScript vendored in eagle_fix/data/asv-js/."""

import base64
import hashlib
import re
import shutil
from pathlib import Path

import asv

from eagle_fix.publish.localize import ASV_CDN, VENDORED, localize_dashboard

ASV_WWW = Path(asv.__file__).parent / "www"
REMOTE = re.compile(r'<(?:script|link)\b[^>]*?(?:src|href)="(https?://[^"]+)"')


def test_every_cdn_file_is_vendored_with_its_licence():
    assert len(ASV_CDN) == 10
    for rel in ASV_CDN.values():
        assert (VENDORED / rel).stat().st_size > 1000, rel
    for package in {rel.split("/")[0] for rel in ASV_CDN.values()}:
        if package == "flot-orderbars@1.0.0":  # its licence is in the file's header
            assert "MIT license" in (VENDORED / package / "js" / "jquery.flot.orderBars.js").read_text(encoding="utf-8")
        else:
            assert list((VENDORED / package).glob("LICENSE*")), f"{package} ships without its licence"


def test_vendored_bytes_match_the_cdn_sri_hashes_asv_names():
    """Where asv pins a sha256 SRI hash, the vendored file is byte for byte the file asv would load."""
    index = (ASV_WWW / "index.html").read_text(encoding="utf-8")
    pinned = dict(re.findall(r'(?:src|href)="(https://[^"]+)" integrity="sha256-([^"]+)"', index))
    assert len(pinned) >= 4, pinned
    for url, sri in pinned.items():
        digest = base64.b64encode(hashlib.sha256((VENDORED / ASV_CDN[url]).read_bytes()).digest()).decode()
        assert digest == sri, f"{ASV_CDN[url]} differs from {url}"


def test_asv_pages_localized_link_no_cdn(tmp_path):
    """asv's own page templates, as `asv publish` writes them: after localizing, every script and
    stylesheet is served from html/vendor/ (asv adding a CDN file would fail here)."""
    html = tmp_path / "html"
    shutil.copytree(ASV_WWW, html)
    assert REMOTE.findall((html / "index.html").read_text(encoding="utf-8")), "asv's template changed"
    assert localize_dashboard(html) == 10
    for page in html.glob("*.html"):
        text = page.read_text(encoding="utf-8")
        assert not REMOTE.findall(text), f"{page.name} still loads {REMOTE.findall(text)}"
        for ref in re.findall(r'(?:src|href)="(vendor/[^"]+)"', text):
            assert (html / ref).is_file(), ref
