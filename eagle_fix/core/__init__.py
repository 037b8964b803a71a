"""Stage 1, what every stage shares: the one error type, the settings, a point's record, statistics, the workload."""
