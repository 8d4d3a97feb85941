# syntax=docker/dockerfile:1
# fleetd's two images, for people with Docker; `make images` builds the
# same two without it (test/framework/ociimage), reproducibly.
#
#   docker build -t fleetd:dev .                                 controller, gateway, pane server, scripted agent
#   docker build --target worker -t fleetd-worker:dev .          the pinned Claude Code and Codex CLIs, node, git, fleetd's binaries
#
# The pane server needs a shell for its panes, so both run on a small
# Debian rather than a shell-less base, as the agent user (65532) with its
# home in /home/agent.
FROM --platform=$BUILDPLATFORM golang:1.26 AS build
ARG TARGETOS
ARG TARGETARCH
WORKDIR /src
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
# Every package the binaries import, and the files they embed
# (config/crd, config/admission, config/samples, herdr/detect/manifests,
# gateway/ui/dist); test/framework/ociimage's tests check the list against
# `go list -deps` and the images against `make images`' recipes.
COPY agents/ agents/
COPY api/ api/
COPY cmd/ cmd/
COPY config/ config/
COPY controllers/ controllers/
COPY delegation/ delegation/
COPY gateway/ gateway/
COPY hack/scriptedagent/ hack/scriptedagent/
COPY herdr/ herdr/
COPY internal/ internal/
COPY panehost/ panehost/
COPY shard/ shard/
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    export CGO_ENABLED=0 GOOS=${TARGETOS:-linux} GOARCH=${TARGETARCH} && \
    go build -trimpath -buildvcs=false -o /out/fleetd ./cmd/fleetd && \
    go build -trimpath -buildvcs=false -o /out/paneserver ./cmd/paneserver && \
    go build -trimpath -buildvcs=false -o /out/scripted-agent ./hack/scriptedagent

# The agent CLIs, pinned by hack/agents' lockfile, as hack/agents.sh
# installs them.
FROM node:22-bookworm-slim AS agents
WORKDIR /opt/fleetd/agents
COPY hack/agents/package.json hack/agents/package-lock.json ./
RUN npm ci --no-audit --no-fund --loglevel=error

FROM debian:bookworm-slim AS base
RUN groupadd --gid 65532 agent && \
    useradd --uid 65532 --gid 65532 --create-home --home-dir /home/agent --shell /bin/sh agent
ENV PATH=/usr/local/bin:/usr/bin:/bin HOME=/home/agent
WORKDIR /home/agent

FROM base AS worker
RUN apt-get update && \
    apt-get install -y --no-install-recommends ca-certificates nodejs git && \
    rm -rf /var/lib/apt/lists/*
COPY --from=agents /opt/fleetd/agents /opt/fleetd/agents
RUN ln -s /opt/fleetd/agents/node_modules/.bin/claude /usr/local/bin/claude && \
    ln -s /opt/fleetd/agents/node_modules/.bin/codex /usr/local/bin/codex
COPY --from=build /out/fleetd /fleetd
COPY --from=build /out/paneserver /paneserver
COPY --from=build /out/scripted-agent /usr/local/bin/scripted-agent
USER 65532:65532
CMD ["/bin/sh"]

# The default target, last: fleetd's image.
FROM base AS fleetd
RUN apt-get update && \
    apt-get install -y --no-install-recommends ca-certificates && \
    rm -rf /var/lib/apt/lists/*
COPY --from=build /out/fleetd /fleetd
COPY --from=build /out/paneserver /paneserver
COPY --from=build /out/scripted-agent /usr/local/bin/scripted-agent
USER 65532:65532
ENTRYPOINT ["/fleetd"]
