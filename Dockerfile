# syntax=docker/dockerfile:1
# One image with every bookrecon binary in /usr/local/bin: ingester, reconciler, escalator,
# query-api, provider-sim and the bookrecon CLI (topics, migrate, publish, ops). docker-compose.yml
# picks the binary with `entrypoint`. Static binaries (CGO off) on Alpine, whose busybox wget
# serves the healthchecks; the process runs as an unprivileged user.

FROM golang:1.26.8-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# VERSION and REVISION label bookrecon_build_info (the build context has no .git to read).
ARG VERSION=dev
ARG REVISION=unknown
RUN CGO_ENABLED=0 go build -trimpath \
      -ldflags "-s -w -X github.com/bookrecon/bookrecon/internal/telemetry.Version=${VERSION} -X github.com/bookrecon/bookrecon/internal/telemetry.Revision=${REVISION}" \
      -o /out/ ./cmd/...

FROM alpine:3.22.1
# /etc/bookrecon/tokens belongs to the service user, so a named volume mounted there (compose's
# tokens volume) is writable by bookrecon tokens.
RUN adduser -D -H -u 10001 bookrecon && install -d -o 10001 -g 10001 -m 0700 /etc/bookrecon/tokens
COPY --from=build /out/ /usr/local/bin/
USER 10001:10001
# Admin ports (/metrics, /livez, /readyz): ingester 9101, reconciler 9102, escalator 9103, query
# API 9104; the query API 8080; the provider simulator 18080.
EXPOSE 9101 9102 9103 9104 8080 18080
ENTRYPOINT ["/usr/local/bin/bookrecon"]
