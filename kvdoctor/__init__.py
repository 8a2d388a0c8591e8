"""kvdoctor: tells vLLM operators which limit they hit and what to change."""

__version__ = "0.1.0"
