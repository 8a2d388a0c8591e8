"""kvdoctor's web layer: HTTP(S) server, JSON API, status page and exporter-toolkit web-config."""

from kvdoctor.web.server import WebServer
from kvdoctor.web.webconfig import WebConfigError, load_web_config

__all__ = ["WebConfigError", "WebServer", "load_web_config"]
