# syntax=docker/dockerfile:1
# fleetd's image: the fleetd binary, the herdr-compatible pane server and the
# scripted test agent. The pane server needs a shell for its panes, so the
# runtime is a small Debian rather than a shell-less base.
#
#   docker build -t fleetd:dev .
FROM --platform=$BUILDPLATFORM golang:1.26 AS build
ARG TARGETOS
ARG TARGETARCH
WORKDIR /src
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY api/ api/
COPY cmd/ cmd/
COPY config/ config/
COPY controllers/ controllers/
COPY gateway/ gateway/
COPY hack/scriptedagent/ hack/scriptedagent/
COPY herdr/ herdr/
COPY internal/ internal/
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    export CGO_ENABLED=0 GOOS=${TARGETOS:-linux} GOARCH=${TARGETARCH} && \
    go build -trimpath -o /out/fleetd ./cmd/fleetd && \
    go build -trimpath -o /out/paneserver ./cmd/paneserver && \
    go build -trimpath -o /out/scripted-agent ./hack/scriptedagent

FROM debian:bookworm-slim
RUN useradd --uid 65532 --user-group --create-home --home-dir /home/agent --shell /bin/sh agent
COPY --from=build /out/fleetd /fleetd
COPY --from=build /out/paneserver /paneserver
COPY --from=build /out/scripted-agent /usr/local/bin/scripted-agent
USER 65532:65532
WORKDIR /home/agent
ENTRYPOINT ["/fleetd"]
