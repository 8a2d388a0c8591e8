"""Diagnosis: from rule results to one bottleneck per (target, model) with findings, evidence and advice."""
