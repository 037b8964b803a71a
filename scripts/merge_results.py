#!/usr/bin/env python
"""Many machines, one dashboard: merge the results trees a CI job matrix uploaded (one per runner) into one
tree, and let each job write its outcome into its own (eagle_fix.store.fleet). The GPU workflow's publish job
runs `merge`, then `eagle-fix publish`; every matrix job runs `job` whatever happened before it."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from eagle_fix.store.fleet import main

if __name__ == "__main__":
    raise SystemExit(main())
