# One statekeeper node; docker-compose.yml runs three of these.
FROM python:3.11-slim

ENV PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /app
COPY . /app
RUN pip install -e '.[server]' \
 && mkdir -p /var/lib/statekeeper /etc/statekeeper

VOLUME ["/var/lib/statekeeper"]
EXPOSE 7000-7002 7100-7102

# The id is chosen per container: `statekeeper node --config ... --id node-N`.
ENTRYPOINT ["statekeeper"]
CMD ["--help"]
