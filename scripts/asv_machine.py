#!/usr/bin/env python
"""Write ~/.asv-machine.json for this box under its fingerprint name (eagle_fix.machine.fingerprint), with the
fingerprint and device keys the dashboard filters on; `--name` only prints the name."""

import argparse
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from eagle_fix.core.errors import EagleFixError
from eagle_fix.store.asv import write_asv_machine


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--machine", help="machine name (default: the fingerprint's, e.g. cpu-intel-f6m207-2c-2215d0)")
    parser.add_argument(
        "--asv",
        default=str(Path(sys.executable).with_name("asv")),
        help="asv executable (default: the one next to this Python)",
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra key for the machine entry, e.g. --set runner=gpu-ci-1",
    )
    parser.add_argument("--name", action="store_true", help="write the entry, print only the machine name")
    args = parser.parse_args()
    extra = dict(kv.split("=", 1) for kv in args.set)
    try:
        entry = write_asv_machine(machine=args.machine, asv=args.asv, extra=extra)
    except EagleFixError as exc:
        print(f"asv_machine: error: {exc}", file=sys.stderr)
        return 1
    print(entry["machine"] if args.name else json.dumps(entry, indent=2, sort_keys=True))
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
