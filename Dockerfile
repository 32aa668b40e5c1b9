# lastcall as a drop-in sidecar image: the official Envoy image plus lastcall's single
# executable (which embeds the filter module). Build context: this repository.
FROM node:20-bookworm-slim AS build
WORKDIR /src
COPY package.json package-lock.json ./
RUN npm ci --no-audit --no-fund
COPY . .
RUN npm run build

FROM envoyproxy/envoy:v1.40.0
# /bin/sh is needed by the orphan watchdog; the Envoy image (Ubuntu based) has it.
COPY --from=build /src/dist/lastcall /usr/local/bin/lastcall
ENV ENVOY_BIN=/usr/local/bin/envoy
EXPOSE 15020
ENTRYPOINT ["/usr/local/bin/lastcall"]
CMD ["run", "--config", "/etc/envoy/envoy.yaml", "--status-address", "0.0.0.0"]
