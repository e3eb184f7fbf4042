# Strata broker image: one broker process; configure it with a properties file and/or --override flags.
FROM python:3.11-slim-bookworm

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1
WORKDIR /opt/strata

COPY pyproject.toml README.md ./
COPY broker ./broker
COPY protocol ./protocol
COPY storage ./storage
COPY remote ./remote
COPY config ./config
COPY pipeline ./pipeline
COPY strata ./strata
RUN pip install '.[iceberg]'

RUN useradd --system --home /var/lib/strata strata && mkdir -p /var/lib/strata && chown strata /var/lib/strata
USER strata
VOLUME ["/var/lib/strata"]
EXPOSE 9092 9464

ENTRYPOINT ["strata", "serve"]
CMD ["/opt/strata/config/server.properties", "--override", "log.dirs=/var/lib/strata/data"]
