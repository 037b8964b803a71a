"""Run a function on a module right after it is first imported (or now, if it is): the plugin wraps a model
runner's internals only in the process that imports the runner, so the front end never imports it."""

from __future__ import annotations

import importlib.abc
import sys
from collections.abc import Callable
from typing import Any

_hooks: dict[str, list[Callable[[Any], None]]] = {}


def when_imported(name: str, fn: Callable[[Any], None]) -> None:
    """Call fn(module) now if `name` is imported, else right after it is first imported."""
    module = sys.modules.get(name)
    if module is not None:
        fn(module)
        return
    _hooks.setdefault(name, []).append(fn)
    if not any(isinstance(f, _PostImportFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _PostImportFinder())


class _PostImportFinder(importlib.abc.MetaPathFinder):
    """Wraps the loader of hooked modules so the hook runs once the module body has executed."""

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname not in _hooks:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                break
        else:
            return None
        loader = spec.loader
        exec_module = getattr(loader, "exec_module", None)
        if exec_module is None:
            return spec

        def exec_and_hook(module: Any) -> None:
            exec_module(module)
            for hook in _hooks.pop(fullname, []):
                hook(module)

        loader.exec_module = exec_and_hook
        return spec
