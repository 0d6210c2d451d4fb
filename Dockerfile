# syntax=docker/dockerfile:1
# Devicedeck: the service, the node agent and the simulators, in one image.
#   docker build -t devicedeck:local .
#   docker run --rm -p 8000:8000 -e DEVICEDECK_AUTH=off devicedeck:local

# Stage 1: the dashboard's front-end packages, exactly as pinned by package-lock.json.
FROM node:22-slim AS frontend
WORKDIR /src
COPY package.json package-lock.json ./
RUN npm ci --no-audit --no-fund --loglevel=error

# Stage 2: a virtualenv with the dependencies and the devicedeck command.
FROM python:3.11-slim AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
RUN python -m venv /opt/venv
WORKDIR /app
# Dependencies first, from pyproject.toml alone, so a code change does not reinstall them.
COPY pyproject.toml ./
RUN python -c "import tomllib; print('\n'.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies']))" > /tmp/requirements.txt \
 && /opt/venv/bin/pip install -r /tmp/requirements.txt
COPY README.md ./
COPY app ./app
# Editable: the code stays in /app next to migrations/, templates/ and static/, where it
# looks for them; the final stage keeps the same paths.
RUN /opt/venv/bin/pip install --no-deps -e .
# static/vendor: the files app.ui.assets picks out of node_modules.
COPY --from=frontend /src/node_modules ./node_modules
RUN /opt/venv/bin/python -m app.ui.assets

# Stage 3: what runs. No compiler, no node, no pip cache.
FROM python:3.11-slim
LABEL org.opencontainers.image.title="devicedeck" \
      org.opencontainers.image.description="Kubernetes device inventory, health history and assignments" \
      org.opencontainers.image.licenses="Apache-2.0"
# SQLite in the user's own directory, so a bare `docker run` works; compose and Kubernetes
# point DEVICEDECK_DATABASE_URL at PostgreSQL.
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONPATH=/app \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    DEVICEDECK_DATABASE_URL=sqlite:////var/lib/devicedeck/devicedeck.db
# A fixed uid, so Kubernetes securityContext and volume ownership can name it. The two
# directories exist owned by it so named volumes mounted there (compose) start writable.
RUN groupadd --system --gid 10001 devicedeck \
 && useradd --system --uid 10001 --gid devicedeck --home-dir /var/lib/devicedeck --shell /usr/sbin/nologin devicedeck \
 && mkdir -p /var/lib/devicedeck/tokens /var/lib/kubelet \
 && chown -R devicedeck:devicedeck /var/lib/devicedeck /var/lib/kubelet
WORKDIR /app
COPY --from=build /opt/venv /opt/venv
COPY --from=build /app/pyproject.toml ./
COPY --from=build /app/app ./app
COPY migrations ./migrations
COPY templates ./templates
COPY static ./static
COPY --from=build /app/static/vendor ./static/vendor
USER devicedeck:devicedeck
EXPOSE 8000
HEALTHCHECK --interval=15s --timeout=5s --start-period=30s --retries=3 \
  CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/livez', timeout=4)"]
ENTRYPOINT ["devicedeck"]
CMD ["serve", "--host", "0.0.0.0", "--port", "8000"]
