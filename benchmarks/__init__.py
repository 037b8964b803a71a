"""asv benchmarks for eagle-fix: glue over eagle_fix.sweep (see docs/benchmarks.md)."""
