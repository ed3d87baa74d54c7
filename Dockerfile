# The portal's production image: gunicorn for web, the same image runs Celery worker and beat.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONPATH=/app \
    PORTAL_VAR_DIR=/app/var \
    STATIC_ROOT=/app/staticfiles

WORKDIR /app

# The own-server driver (ssh) talks to the company's GPU servers with OpenSSH's client.
RUN apt-get update \
    && apt-get install -y --no-install-recommends openssh-client \
    && rm -rf /var/lib/apt/lists/*

COPY . .
# Every cloud driver's SDK (the extras of pyproject.toml); ssh needs none, only OpenSSH.
RUN pip install ".[aws,kubernetes,alibaba]" \
    && PORTAL_ENV=production \
       SECRET_KEY=collectstatic-only \
       PORTAL_ENCRYPTION_KEYS=AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA= \
       ALLOWED_HOSTS=localhost \
       PORTAL_INSTALLATION_ID=build \
       DATABASE_URL=sqlite:////tmp/build.sqlite3 \
       CELERY_BROKER_URL=redis://localhost:6379/0 \
       REDIS_URL=redis://localhost:6379/1 \
       sh -c 'python manage.py compile_translations && python manage.py collectstatic --noinput --verbosity 0' \
    && useradd --system --uid 1000 --home-dir /app portal \
    && mkdir -p /app/var \
    && chown -R portal:portal /app/var

USER portal
EXPOSE 8000

CMD ["gunicorn", "portal.wsgi", "--bind", "0.0.0.0:8000", "--workers", "3", "--access-logfile", "-"]
