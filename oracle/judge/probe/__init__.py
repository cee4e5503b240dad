"""The probe: the noise twin, the drift and precision verdicts, calibration."""
