# syntax=docker/dockerfile:1
#
# The mcp-state-guard image: built on the official Rust image, run on distroless (glibc
# and libgcc only: no shell, no package manager), as the non-root user 65532.
#
#   commit=$(git rev-parse --short=12 HEAD)
#   version="mcp-state-guard $(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1) (commit $commit)"
#   docker build --build-arg STATE_GUARD_COMMIT="$commit" --build-arg VERSION="$version" \
#     -t mcp-state-guard:0.1.0 .
#
# VERSION becomes the image's version label; the build fails unless the built binary's
# `--version` prints exactly it. The build stage runs .ci/build-release.sh, the script
# the tests run too, so the tests run the binary this image ships.

FROM rust:1.95-bookworm AS build
ARG STATE_GUARD_COMMIT
ARG VERSION
WORKDIR /src
COPY Cargo.toml Cargo.lock ./
COPY src ./src
COPY benches ./benches
COPY .ci/build-release.sh ./.ci/build-release.sh
# No .git in the context: the commit comes from the build argument.
ENV STATE_GUARD_COMMIT=${STATE_GUARD_COMMIT}
RUN test -n "${VERSION}" || { echo "--build-arg VERSION is required (see the top of this file)" >&2; exit 1; }
RUN .ci/build-release.sh /out "${VERSION}"

FROM gcr.io/distroless/cc-debian12:nonroot
ARG STATE_GUARD_COMMIT
ARG VERSION
LABEL org.opencontainers.image.title="mcp-state-guard" \
      org.opencontainers.image.description="Sidecar reverse proxy that seals MCP requestState for unmodified MCP servers" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${STATE_GUARD_COMMIT}"
COPY --from=build /out/mcp-state-guard /usr/local/bin/mcp-state-guard
USER 65532:65532
EXPOSE 8080 9090
ENTRYPOINT ["/usr/local/bin/mcp-state-guard"]
CMD ["run", "--config", "/etc/mcp-state-guard/config/mcp-state-guard.toml"]
