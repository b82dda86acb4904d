# lanectl in a small image, for docker-compose.yml and for running beside
# a managed Redis:
#
#   docker build --build-arg VERSION=$(git describe --tags --always --dirty) -t lanes/lanectl .
#   make image      # the same, tagged lanes/lanectl:VERSION
#
# VERSION is what `lanectl --version` prints (without it, "devel").
FROM golang:1.26-bookworm AS build
WORKDIR /src
# lanectl's module alone, as a user's build sees it: its go.mod replaces the
# library with this checkout's root, and GOWORK=off leaves go.work and the
# test modules (integration, bench) out. The go.mod files first, so that
# the download layer is reused while only sources change.
COPY go.mod go.sum ./
COPY cmd/lanectl/go.mod cmd/lanectl/go.sum cmd/lanectl/
RUN cd cmd/lanectl && GOWORK=off go mod download
COPY . .
ARG VERSION=
RUN CGO_ENABLED=0 GOWORK=off go build -C cmd/lanectl -trimpath -ldflags "-X main.version=${VERSION}" -o /out/lanectl .

FROM debian:bookworm-slim
# CA certificates, so that rediss:// to a managed Redis verifies its server.
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates \
 && rm -rf /var/lib/apt/lists/*
# A user of its own, by number, so that runAsNonRoot can check it, and a
# directory it owns: a new named volume mounted there starts owned by it.
RUN useradd --system --uid 10001 --user-group --create-home --home-dir /home/lanes lanes \
 && install -d -o 10001 -g 10001 /var/lib/lanes
COPY --from=build /out/lanectl /usr/local/bin/lanectl
USER 10001:10001
WORKDIR /var/lib/lanes
ENTRYPOINT ["lanectl"]
