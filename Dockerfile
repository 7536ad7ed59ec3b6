# Multi-stage build of the same binary `make build` produces. The image runs
# against a ClickHouse server and PostgreSQL (see docker-compose.yml), so it
# does not need the embedded engines' npm packages.
# Browser libraries (uPlot, htmx) come from npm at the lockfile's versions;
# the embedded engines' packages are not needed in this image.
FROM node:20-bookworm-slim AS assets
WORKDIR /src
COPY package.json package-lock.json ./
RUN npm ci --no-audit --no-fund --omit=optional --ignore-scripts \
    && mkdir -p /out && cp node_modules/uplot/dist/uPlot.iife.min.js node_modules/uplot/dist/uPlot.min.css node_modules/htmx.org/dist/htmx.min.js /out/

FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
COPY --from=assets /out/ web/static/vendor/
RUN CGO_ENABLED=0 go build -trimpath -o /out/tokenpath-server ./cmd/server

FROM debian:bookworm-slim
RUN apt-get update && apt-get install -y --no-install-recommends ca-certificates && rm -rf /var/lib/apt/lists/* \
    && useradd --system --home /var/lib/tokenpath tokenpath && mkdir -p /var/lib/tokenpath && chown tokenpath /var/lib/tokenpath
COPY --from=build /out/tokenpath-server /usr/local/bin/tokenpath-server
USER tokenpath
ENV TOKENPATH_DATA_DIR=/var/lib/tokenpath
EXPOSE 8080 4317 4318
ENTRYPOINT ["/usr/local/bin/tokenpath-server"]
