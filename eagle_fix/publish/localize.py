"""asv's published dashboard made to work offline: its CDN scripts and styles copied in, the pages pointed at the copies."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from eagle_fix.core.errors import EagleFixError

# asv 0.6.6's dashboard pulls these from CDNs (with SRI hashes); the same packages' files, from the npm
# registry, are vendored (MIT-licensed, with their licences) in eagle_fix/data/asv-js/<name@version>/.
VENDORED = Path(__file__).resolve().parents[1] / "data" / "asv-js"
ASV_CDN = {
    "https://code.jquery.com/jquery-3.3.1.min.js": "jquery@3.3.1/dist/jquery.min.js",
    "https://cdnjs.cloudflare.com/ajax/libs/flot/0.8.3/jquery.flot.min.js": "flot@0.8.3/jquery.flot.js",
    "https://cdnjs.cloudflare.com/ajax/libs/flot/0.8.3/jquery.flot.time.min.js": "flot@0.8.3/jquery.flot.time.js",
    "https://cdnjs.cloudflare.com/ajax/libs/flot/0.8.3/jquery.flot.selection.min.js": "flot@0.8.3/jquery.flot.selection.js",
    "https://cdnjs.cloudflare.com/ajax/libs/flot/0.8.3/jquery.flot.categories.min.js": "flot@0.8.3/jquery.flot.categories.js",
    "https://cdn.jsdelivr.net/npm/flot-orderbars@1.0.0/js/jquery.flot.orderBars.js": "flot-orderbars@1.0.0/js/jquery.flot.orderBars.js",
    "https://cdnjs.cloudflare.com/ajax/libs/stupidtable/1.0.1/stupidtable.min.js": "stupid-table-plugin@1.1.3/stupidtable.min.js",
    "https://cdnjs.cloudflare.com/ajax/libs/blueimp-md5/2.19.0/js/md5.min.js": "blueimp-md5@2.19.0/js/md5.min.js",
    "https://cdn.jsdelivr.net/npm/bootstrap@3.1.1/dist/js/bootstrap.min.js": "bootstrap@3.1.1/dist/js/bootstrap.min.js",
    "https://cdn.jsdelivr.net/npm/bootstrap@3.1.1/dist/css/bootstrap.min.css": "bootstrap@3.1.1/dist/css/bootstrap.min.css",
}


def localize_dashboard(html_dir: str | Path, js_dir: str | Path = VENDORED) -> int:
    """Make a published asv dashboard work offline: copy its CDN files into html_dir/vendor/ and
    point the pages there (without the SRI attributes, which name the CDN's minified bytes).
    Returns how many references were rewritten."""
    html_dir, js_dir = Path(html_dir), Path(js_dir)
    missing = [rel for rel in ASV_CDN.values() if not (js_dir / rel).is_file()]
    if missing:
        raise EagleFixError(
            f"{js_dir}/ lacks {missing[0]} (and {len(missing) - 1} more): restore eagle_fix/data/asv-js/ from git"
        )
    vendor = html_dir / "vendor"
    vendor.mkdir(exist_ok=True)
    for rel in ASV_CDN.values():
        shutil.copyfile(js_dir / rel, vendor / rel.replace("/", "_"))
    count = 0
    for page in html_dir.glob("*.html"):
        text = page.read_text(encoding="utf-8")
        for url, rel in ASV_CDN.items():
            tag = re.compile(r'(<(?:script|link)\b[^>]*?)(?:src|href)="' + re.escape(url) + r'"([^>]*>)')

            def local(m, rel=rel):
                attrs = re.sub(r'\s(?:integrity|crossorigin|referrerpolicy)="[^"]*"', "", m.group(1) + m.group(2))
                kind = "src" if attrs.startswith("<script") else "href"
                return attrs[:-1].rstrip() + f' {kind}="vendor/{rel.replace("/", "_")}">'

            text, n = tag.subn(local, text)
            count += n
        page.write_text(text, encoding="utf-8")
    return count
