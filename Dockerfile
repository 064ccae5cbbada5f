# The kerf-operator image the Helm chart runs: `docker build -t REPO/kerf-operator:TAG .`
# Build stage: the workspace at the toolchain the project pins (stable, edition 2024).
FROM rust:1.95-bookworm AS build
WORKDIR /src
COPY . .
# line tables are dropped (430 MB → 56 MB); symbols stay, so a backtrace names functions
RUN cargo build --release --locked -p kerf-operator \
 && strip --strip-debug -o /kerf-operator target/release/kerf-operator

# Run stage: glibc and CA certificates only (TLS is rustls), running as uid 65532 as the
# chart's securityContext requires.
FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /kerf-operator /kerf-operator
USER 65532:65532
ENTRYPOINT ["/kerf-operator"]
