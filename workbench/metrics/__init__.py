"""Metrics: answer matching (qa), ranking (AUROC), rejection (PRR, AURAC, risk-coverage, Spearman), calibration
(ECE, Brier, reliability), and the LLM-judge correctness label."""
