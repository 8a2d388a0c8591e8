"""kvdoctor's configuration: YAML with environment overrides, validated with every error reported at once."""

from kvdoctor.config.load import ConfigError, check_config, load_config
from kvdoctor.config.schema import Config, TargetSpec

__all__ = ["Config", "ConfigError", "TargetSpec", "check_config", "load_config"]
