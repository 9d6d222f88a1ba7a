"""Judges you can trust: agreement with human labels, prediction-powered means, calibration."""
