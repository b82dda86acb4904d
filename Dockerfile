# lanectl in a small image, for docker-compose.yml.
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -o /lanectl ./cmd/lanectl

FROM debian:bookworm-slim
COPY --from=build /lanectl /usr/local/bin/lanectl
ENTRYPOINT ["lanectl"]
