# kvdoctor: `kvdoctor serve` by default; the same image runs `kvdoctor replay-server` for the compose demo.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /app
# README* matches nothing harmlessly if the readme is absent; pyproject names it as the long description.
COPY pyproject.toml README* ./
COPY kvdoctor ./kvdoctor
COPY rules ./rules
RUN pip install . \
    && useradd --system --uid 10001 --user-group --home-dir /var/lib/kvdoctor --create-home kvdoctor

USER kvdoctor
WORKDIR /var/lib/kvdoctor
# Defaults below the config file (a `listen:` or `health_listen:` there wins): every interface, since a
# container's loopback is unreachable from outside, and the plain health listener on loopback for HEALTHCHECK,
# which thus stays right when the main port has TLS and basic auth (Kubernetes sets health_listen: 0.0.0.0:9861).
ENV KVDOCTOR_DEFAULT_LISTEN=0.0.0.0:9860 \
    KVDOCTOR_DEFAULT_HEALTH_LISTEN=127.0.0.1:9861
EXPOSE 9860
HEALTHCHECK --interval=30s --timeout=5s --start-period=20s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:9861/-/healthy', timeout=3)"]

ENTRYPOINT ["kvdoctor"]
CMD ["serve", "--config", "/etc/kvdoctor/kvdoctor.yml"]
