"""Stage 7, where results live: asv's results (the suite's glue and machine file) and the loader that reads them
with the run records beside them."""
