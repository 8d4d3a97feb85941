# fleetd's image: the fleetd binary, the herdr-compatible pane server and the
# scripted test agent. The pane server needs a shell for its panes, so the
# runtime is a small Debian rather than a shell-less base.
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY api/ api/
COPY cmd/ cmd/
COPY config/ config/
COPY controllers/ controllers/
COPY gateway/ gateway/
COPY hack/scriptedagent/ hack/scriptedagent/
COPY herdr/ herdr/
COPY internal/ internal/
RUN CGO_ENABLED=0 go build -trimpath -o /out/fleetd ./cmd/fleetd && \
    CGO_ENABLED=0 go build -trimpath -o /out/paneserver ./cmd/paneserver && \
    CGO_ENABLED=0 go build -trimpath -o /out/scripted-agent ./hack/scriptedagent

FROM debian:bookworm-slim
RUN useradd --uid 65532 --create-home --home-dir /home/agent agent
COPY --from=build /out/fleetd /fleetd
COPY --from=build /out/paneserver /paneserver
COPY --from=build /out/scripted-agent /usr/local/bin/scripted-agent
USER 65532:65532
WORKDIR /home/agent
ENTRYPOINT ["/fleetd"]
