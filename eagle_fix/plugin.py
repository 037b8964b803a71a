"""Compatibility: a venv installed before the package was split by stage names `eagle_fix.plugin:register` as
its `vllm.general_plugins` entry point (pip wrote it at install time). Without this module vLLM would log a
failed plugin load and run without the fix. The plugin is `eagle_fix.fix.plugin`."""

from eagle_fix.fix.plugin import register

__all__ = ["register"]
