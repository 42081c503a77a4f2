# schedcache with its CLI; used by docker-compose.yml.
FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md ./
COPY schedcache ./schedcache
COPY lua ./lua
RUN pip install --no-cache-dir .
ENTRYPOINT ["schedcache"]
CMD ["--help"]
