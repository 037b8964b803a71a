"""eagle-fix: the EAGLE3 long-context position fix for vLLM, and the suite that measures it.

The fix itself is `eagle_fix.fix.positions` (vLLM PR #49343 as a library); `eagle_fix.fix.plugin` backports
it into an engine. The stages, in the order data flows (a stage imports only earlier ones):

  core      the error type, the settings, the arm and fix-arm registries, a point and its words, where results/
            is, a point's record, statistics, the seeded workload
  fix       the fix, the vLLM plugin (its hooks, the drafter's counters, the step clock), the doctor
  pairs     which target/draft pair a run uses: profiles, their checks, the tiny pair's training
  machine   the machine a number was measured on: fingerprint, measured limits, roofline, pinning, NVML
  engine    one vLLM engine in its own process: spec, process and lifeline, the child, a point's measurement
  sweep     `eagle-fix run`: the plan of points, the road from a profile to an engine, the loop
  store     asv's results and the loader that reads them with the records beside them
  gate      verdicts, `eagle-fix compare`, `eagle-fix ab`, the gate's calibration
  served    vLLM's OpenAI server under vLLM's bench client: `eagle-fix map`
  releases  the engine release as an axis: the registry and `eagle-fix matrix`
  publish   what people see: the report, the docs' tables, the dashboard

`eagle_fix.cli` wires the commands; `eagle_fix.plugin` and `eagle_fix.memory` only keep module paths that
venvs installed before this layout name.
"""

__version__ = "0.1.0"
