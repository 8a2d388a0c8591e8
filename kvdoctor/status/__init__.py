"""What kvdoctor knows right now (targets, diagnoses, history) and its own /metrics built from it."""
