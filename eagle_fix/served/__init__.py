"""Stage 9, served mode: vLLM's OpenAI server loaded by vLLM's own bench client, and the break-even map."""
