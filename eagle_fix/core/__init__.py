"""Stage 1, what every stage shares: the one error type, the settings, the arm registries (core.arms), a point and
its words (core.point), where results/ is (core.paths), a point's record, statistics, the workload."""
