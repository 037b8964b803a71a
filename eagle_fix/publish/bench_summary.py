"""scripts/bench.sh's last words: the summary that opens the report `eagle-fix publish` wrote beside asv's
dashboard (eagle_fix.publish.summary made it), printed for the terminal: `python -m eagle_fix.publish.bench_summary`."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from eagle_fix.core.errors import EagleFixError


def report_summary(report: Path) -> str:
    """The summary section of a written report.md (its first screen), as plain text for a terminal."""
    lines = report.read_text(encoding="utf-8").splitlines()
    if "## Summary" not in lines:
        raise EagleFixError(f"{report}: no summary in it; write it again with `eagle-fix report`")
    start = lines.index("## Summary")
    end = lines.index("## Details") if "## Details" in lines else len(lines)
    return "\n".join(lines[start:end]).replace("**", "").rstrip()


def _html_dir(config: Path) -> Path:
    """asv's html_dir of an asv config, as `eagle-fix publish` resolves it."""
    from asv import util  # asv only for the terminal's summary: `eagle-fix --help` stays fast

    if not config.is_file():
        raise EagleFixError(f"{config}: no asv config there; run from the repository root or give --config")
    return (config.resolve().parent / util.load_json(str(config), js_comments=True)["html_dir"]).resolve()


def main(argv: list[str] | None = None) -> int:
    """scripts/bench.sh's last words: the summary of the report `eagle-fix publish` wrote beside the dashboard."""
    parser = argparse.ArgumentParser(
        prog="python -m eagle_fix.publish.bench_summary",
        description="print the summary of the report published beside asv's dashboard",
    )
    parser.add_argument("--config", default="asv.conf.json", help="asv config (its html_dir)")
    args = parser.parse_args(argv)
    try:
        report = _html_dir(Path(args.config)) / "eagle-fix" / "report.md"
        if not report.is_file():
            raise EagleFixError(f"{report}: no report there; run `.venv/bin/eagle-fix publish` first")
        print(report_summary(report))
        print(f"(from {report}; the tables follow there)")
    except EagleFixError as exc:
        print(f"eagle-fix: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
