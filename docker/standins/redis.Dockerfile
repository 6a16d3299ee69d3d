# A stand-in for the official redis image from Debian's packages (README.md here).
ARG BASE_IMAGE
FROM ${BASE_IMAGE}
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends redis-server \
 && rm -rf /var/lib/apt/lists/* \
 && mkdir -p /data && chown redis:redis /data
VOLUME /data
EXPOSE 6379
USER redis
WORKDIR /data
# As the official image: no config file, reachable from the other containers.
CMD ["redis-server", "--protected-mode", "no", "--dir", "/data"]
