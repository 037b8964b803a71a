"""Stage 8, telling a regression from noise: verdicts, `eagle-fix compare` between result sets, `eagle-fix ab`
between two environments side by side, and the gate's calibration."""
