"""eagle-fix: the EAGLE3 long-context position fix for vLLM, and the suite that measures it."""

__version__ = "0.1.0"
