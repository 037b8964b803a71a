"""Compatibility: engines started by an eagle-fix from before the package was split by stage name the worker
extension `eagle_fix.memory.WorkerExtension` (`worker_extension_cls`). It is `eagle_fix.engine.worker`'s."""

from eagle_fix.engine.worker import WorkerExtension

__all__ = ["WorkerExtension"]
