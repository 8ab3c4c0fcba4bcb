# One statekeeper node; docker-compose.yml runs three of these.
FROM python:3.11-slim

ENV PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /app
COPY . /app
RUN pip install -e '.[server]' \
 && groupadd --system --gid 10001 statekeeper \
 && useradd --system --uid 10001 --gid 10001 --no-create-home statekeeper \
 && mkdir -p /var/lib/statekeeper /etc/statekeeper \
 && chown statekeeper:statekeeper /var/lib/statekeeper

# Not root: deploy/k8s runs it as 10001 with a read-only root filesystem.
USER 10001

VOLUME ["/var/lib/statekeeper"]
EXPOSE 7000-7002 7100-7102

# The id is chosen per container: `statekeeper node --config ... --id node-N`.
ENTRYPOINT ["statekeeper"]
CMD ["--help"]
