"""Stage 5, one real vLLM engine in a process of its own: its spec, the process and its lifeline, the child that
runs `vllm.LLM`, what a point measures there, and memory."""
