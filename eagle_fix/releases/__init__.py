"""Stage 10, the engine release as an axis: the registry of releases and the matrix that runs the suite in each."""
