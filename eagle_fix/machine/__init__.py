"""Stage 4, the machine a number was measured on: its fingerprint, its measured limits, a point's %-of-roofline,
the cores the engine's threads run on, and the GPU as NVML sees it."""
