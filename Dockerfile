# lastcall as a drop-in sidecar image: the official Envoy image plus lastcall's single executable
# (which embeds the filter module). Build context: this repository.
#
#   podman build -t lastcall:0.1.0 .        (or docker build; `npm run image` builds it here from
#                                            local stand-ins of both base images, see build/image.mjs)
#
# Both base images are arguments so a build can substitute its own (a mirror, a pinned digest).
ARG NODE_IMAGE=node:20-bookworm-slim
ARG ENVOY_IMAGE=envoyproxy/envoy:v1.40.0

FROM ${NODE_IMAGE} AS build
WORKDIR /src
COPY package.json package-lock.json ./
# npm's config for a mirror, and the certificates of a TLS-inspecting proxy, can be passed as
# build secrets, which land in no layer (without them npm uses the public registry):
#   --secret id=npmrc,src=$HOME/.npmrc  --secret id=npm_ca,src=ca.pem  (npmrc: cafile=/run/secrets/npm_ca)
RUN --mount=type=secret,id=npmrc,target=/root/.npmrc --mount=type=secret,id=npm_ca \
    npm ci --no-audit --no-fund --loglevel=error
COPY . .
RUN npm run --silent build

FROM ${ENVOY_IMAGE}
COPY --from=build /src/dist/lastcall /usr/local/bin/lastcall
# Envoy Gateway runs its shutdown-manager image as `envoy-gateway envoy shutdown-manager|shutdown`:
# under that name lastcall is Envoy Gateway's pair (docs/migration.md), so only the image changes.
RUN ln -s lastcall /usr/local/bin/envoy-gateway
ENV ENVOY_BIN=/usr/local/bin/envoy
# The Envoy image's own user and group (101, "envoy"): lastcall needs no privilege of its own,
# and Envoy, its child, runs as the same user. Listen on ports >= 1024 (or grant
# NET_BIND_SERVICE in the pod's securityContext). The group is named so that the runtime need not
# mount the image to look it up in /etc/passwd at each container's creation (containerd does).
USER 101:101
EXPOSE 15020
# PID 1 is lastcall itself, without an init:
# - Signals: it handles SIGTERM and SIGINT (drain, then stop Envoy; a second SIGINT stops at
#   once), so the kernel's "PID 1 ignores signals it has no handler for" does not bite, and it
#   forwards nothing: Envoy runs in its own process group and is stopped by lastcall.
# - Zombies: lastcall's children, Envoy and the watchdog /bin/sh, are reaped by lastcall. Envoy
#   does not fork, and the probes and hooks (`lastcall wait`, `lastcall drain`, HTTP) leave no
#   orphans, so none arise. Whoever execs daemonising commands into the container should add an
#   init (`podman run --init`, `docker run --init`) or share the pod's process namespace
#   (`shareProcessNamespace: true`: the pause container is PID 1 and reaps).
# - If lastcall is killed, PID 1 is gone and the kernel kills Envoy with the rest of the
#   container.
ENTRYPOINT ["/usr/local/bin/lastcall"]
CMD ["run", "--config", "/etc/envoy/envoy.yaml", "--status-address", "0.0.0.0"]
