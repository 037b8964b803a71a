"""Stage 6, `eagle-fix run`: the plan of points, one road from a profile to an engine, the loop that measures
them and writes one JSON line each."""
