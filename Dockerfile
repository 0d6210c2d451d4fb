# Devicedeck: the service, the node agent and the simulators, in one image.
#   docker build -t devicedeck:local .
#   docker run --rm -p 8000:8000 -e DEVICEDECK_AUTH=off devicedeck:local
#
# Both stages start from the same Python image, pinned by the digest of its multi-architecture
# index as well as by tag: a tag can be moved to other contents, a digest cannot.

# Stage 1: the wheel, and a virtualenv holding the locked dependencies and that wheel.
FROM python:3.11.14-slim-bookworm@sha256:65a93d69fa75478d554f4ad27c85c1e69fa184956261b4301ebaf6dbb0a3543d AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
WORKDIR /src
# Dependencies first, from the lock files alone, so a code change does not reinstall them.
# --require-hashes: every file pip installs must match a hash in the lock.
COPY requirements ./requirements
RUN python -m venv /opt/build \
 && /opt/build/bin/pip install --require-hashes -r requirements/build.txt \
 && python -m venv /opt/venv \
 && /opt/venv/bin/pip install --require-hashes -r requirements/runtime.txt
COPY pyproject.toml setup.py MANIFEST.in README.md LICENSE ./
COPY devicedeck ./devicedeck
COPY migrations ./migrations
COPY templates ./templates
COPY static ./static
# The wheel carries migrations/, templates/ and static/ (vendored scripts included). Installed
# with --no-index, so a dependency missing from the lock fails the build.
RUN /opt/build/bin/pip wheel --no-deps --no-build-isolation --wheel-dir /dist . \
 && /opt/venv/bin/pip install --no-index /dist/devicedeck-*.whl

# Stage 2: what runs. No source tree, no build tools, no pip cache.
FROM python:3.11.14-slim-bookworm@sha256:65a93d69fa75478d554f4ad27c85c1e69fa184956261b4301ebaf6dbb0a3543d
LABEL org.opencontainers.image.title="devicedeck" \
      org.opencontainers.image.description="Kubernetes device inventory, health history and assignments" \
      org.opencontainers.image.licenses="Apache-2.0"
# SQLite in the user's own directory, so a bare `docker run` works; compose and Kubernetes
# point DEVICEDECK_DATABASE_URL at PostgreSQL.
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    DEVICEDECK_DATABASE_URL=sqlite:////var/lib/devicedeck/devicedeck.db
# A fixed uid, so Kubernetes securityContext and volume ownership can name it. The two
# directories exist owned by it so named volumes mounted there (compose) start writable.
RUN groupadd --system --gid 10001 devicedeck \
 && useradd --system --uid 10001 --gid devicedeck --home-dir /var/lib/devicedeck --shell /usr/sbin/nologin devicedeck \
 && mkdir -p /var/lib/devicedeck/tokens /var/lib/kubelet \
 && chown -R devicedeck:devicedeck /var/lib/devicedeck /var/lib/kubelet
COPY --from=build /opt/venv /opt/venv
USER devicedeck:devicedeck
WORKDIR /var/lib/devicedeck
EXPOSE 8000
HEALTHCHECK --interval=15s --timeout=5s --start-period=30s --retries=3 \
  CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/livez', timeout=4)"]
ENTRYPOINT ["devicedeck"]
CMD ["serve", "--host", "0.0.0.0", "--port", "8000"]
