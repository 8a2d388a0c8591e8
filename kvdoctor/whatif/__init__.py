"""What-if: predict what a flag change buys by simulating vLLM's V1 scheduler on the workload the metrics show."""
