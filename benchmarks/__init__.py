"""asv benchmarks for eagle-fix: glue over eagle_fix.sweep.loop (see docs/benchmarks.md)."""
