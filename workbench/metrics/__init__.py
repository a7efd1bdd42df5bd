"""Metrics: answer matching (EM, token F1, containment) here; ranking and calibration metrics come later."""
