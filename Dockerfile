# syntax=docker/dockerfile:1
#
# The mcp-state-guard image: built on the official Rust image, run on distroless (glibc
# and libgcc only: no shell, no package manager), as the non-root user 65532.
#
# From source (the build stage compiles):
#
#   commit=$(git rev-parse --short=12 HEAD)
#   version="mcp-state-guard $(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1) (commit $commit)"
#   source=$(git remote get-url origin)
#   docker build --build-arg STATE_GUARD_COMMIT="$commit" --build-arg VERSION="$version" \
#     --build-arg SOURCE="$source" -t mcp-state-guard:0.1.0 .
#
# From a binary .ci/build-release.sh already built (the build context is its output
# directory; the build stage is skipped):
#
#   .ci/build-release.sh target/image "$version"
#   docker build --build-arg BINARY_FROM=prebuilt --build-arg STATE_GUARD_COMMIT="$commit" \
#     --build-arg VERSION="$version" --build-arg SOURCE="$source" \
#     -f Dockerfile -t mcp-state-guard:0.1.0 target/image
#
# The build is profile-guided (.ci/build-release.sh: an instrumented build, the
# performance harness's training workload through it on loopback, then the shipped
# build with the merged profile; rustup's llvm-tools component is added for
# llvm-profdata). `--build-arg STATE_GUARD_PGO=off` builds without a profile, for a
# builder that cannot fetch the component.
#
# VERSION, STATE_GUARD_COMMIT and SOURCE (where the code came from) become the image's
# OCI labels. VERSION is checked: .ci/build-release.sh fails unless the built
# binary's `--version` prints exactly it (the build stage passes it; so does the second
# form's first line), so a label cannot lie. The tests (tests/cases/image.rs) build the
# second form with buildah on a base made from Debian's packages
# (tests/image/runtime-base.sh) and read the label back against the binary in the image.

# The base images, each replaceable by a mirror or a local equivalent.
ARG BUILD_IMAGE=rust:1.95-bookworm
ARG RUNTIME_IMAGE=gcr.io/distroless/cc-debian12:nonroot
# Where the shipped binary comes from: `build` (compiled below) or `prebuilt`.
ARG BINARY_FROM=build

FROM ${BUILD_IMAGE} AS build
ARG STATE_GUARD_COMMIT
ARG VERSION
ARG STATE_GUARD_PGO=on
WORKDIR /src
COPY Cargo.toml Cargo.lock ./
COPY src ./src
COPY benches ./benches
COPY .ci/build-release.sh ./.ci/build-release.sh
# No .git in the context: the commit comes from the build argument.
ENV STATE_GUARD_COMMIT=${STATE_GUARD_COMMIT} STATE_GUARD_PGO=${STATE_GUARD_PGO}
RUN test -n "${VERSION}" || { echo "--build-arg VERSION is required (see the top of this file)" >&2; exit 1; }
RUN .ci/build-release.sh /out "${VERSION}"

FROM scratch AS prebuilt
COPY mcp-state-guard /out/mcp-state-guard

FROM ${BINARY_FROM} AS binary

# The runtime stage: the same lines ship whichever stage made the binary.
FROM ${RUNTIME_IMAGE}
ARG STATE_GUARD_COMMIT
ARG VERSION
ARG SOURCE
LABEL org.opencontainers.image.title="mcp-state-guard" \
      org.opencontainers.image.description="Sidecar reverse proxy that seals MCP requestState for unmodified MCP servers" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.source="${SOURCE}" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${STATE_GUARD_COMMIT}"
COPY --from=binary /out/mcp-state-guard /usr/local/bin/mcp-state-guard
USER 65532:65532
EXPOSE 8080 9090
ENTRYPOINT ["/usr/local/bin/mcp-state-guard"]
CMD ["run", "--config", "/etc/mcp-state-guard/config/mcp-state-guard.toml"]
