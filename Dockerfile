# syntax=docker/dockerfile:1
# gap-auditor container image.
#
#   docker build --build-arg GAP_AUDITOR_GIT_REV="$(git rev-parse --short=12 HEAD)" -t gap-auditor .
#   docker run --rm -p 9464:9464 -v "$PWD/my.toml:/etc/gap-auditor/gap-auditor.toml:ro" gap-auditor
#
# Stages: chef (toolchain + cargo-chef) -> planner (dependency recipe) -> builder (dependencies
# cooked in their own layer, so editing src/ does not rebuild librdkafka and OpenSSL) ->
# runtime (debian slim, non-root: the binary, config/ with the example at
# /etc/gap-auditor/gap-auditor.toml, the dashboard).

ARG RUST_VERSION=1.95
ARG DEBIAN_RELEASE=bookworm

FROM rust:${RUST_VERSION}-slim-${DEBIAN_RELEASE} AS chef
# rdkafka builds librdkafka from source with CMake (cmake; C and C++) together with a
# static libcurl (for OIDC), the ssl-vendored feature builds OpenSSL (perl, make), zstd-sys
# and the bundled SQLite need a C compiler; zlib and Cyrus SASL (Kerberos/GSSAPI) are linked
# from the system (pkg-config), so the binary needs libc, libm, libgcc_s, libz and libsasl2
# at run time.
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends \
      build-essential cmake perl pkg-config python3 zlib1g-dev libsasl2-dev ca-certificates \
 && rm -rf /var/lib/apt/lists/*
# cargo-auditable: the release build embeds its dependency list (an SBOM in the binary's
# .dep-v0 section, read by `cargo audit bin`, syft and trivy); `--version` then says
# `SBOM: cargo-auditable`.
RUN cargo install --locked cargo-chef@0.1.78 cargo-auditable@0.7.7
WORKDIR /src

FROM chef AS planner
COPY . .
RUN cargo chef prepare --recipe-path recipe.json

FROM chef AS builder
# The build's RUN pipes --version into grep: a failing command must fail the step.
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
COPY --from=planner /src/recipe.json recipe.json
RUN cargo chef cook --release --locked --features kerberos-oidc --recipe-path recipe.json --bin gap-auditor
COPY . .
# .git is not in the build context (.dockerignore): build.rs reads the revision from here.
ARG GAP_AUDITOR_GIT_REV=unknown
RUN cargo auditable build --release --locked --features kerberos-oidc --bin gap-auditor \
 && install -D -m 0755 target/release/gap-auditor /out/gap-auditor \
 && /out/gap-auditor --version | grep -F 'SBOM: cargo-auditable' 

FROM debian:${DEBIAN_RELEASE}-slim AS runtime
LABEL org.opencontainers.image.title="gap-auditor" \
      org.opencontainers.image.description="Proves that what a pipeline read from Kafka landed in Doris or Elasticsearch, and names the offsets that did not" \
      org.opencontainers.image.licenses="MIT OR Apache-2.0"
# ca-certificates: TLS to Kafka, Doris and Elasticsearch verifies against the system roots.
# libsasl2-2 is linked; libsasl2-modules-gssapi-mit is the Kerberos mechanism it loads for
# sasl.mechanism=GSSAPI (a krb5.conf and keytab are mounted by the deployment).
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates libsasl2-2 \
      libsasl2-modules-gssapi-mit \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --system --gid 10001 gap-auditor \
 && useradd --system --uid 10001 --gid gap-auditor --home-dir /var/lib/gap-auditor \
      --shell /usr/sbin/nologin gap-auditor \
 && install -d -o gap-auditor -g gap-auditor -m 0750 /var/lib/gap-auditor
COPY --from=builder /out/gap-auditor /usr/local/bin/gap-auditor
COPY config/gap-auditor.toml /etc/gap-auditor/gap-auditor.toml
COPY config/ /usr/share/gap-auditor/config/
COPY dashboards/gap-auditor.json /usr/share/gap-auditor/dashboards/gap-auditor.json
COPY LICENSE-MIT LICENSE-APACHE CHANGELOG.md /usr/share/doc/gap-auditor/

# The store (gaps, progress) must outlive the container: that is what makes restarts exact.
ENV GAP_AUDITOR__STATE__PATH=/var/lib/gap-auditor/state
VOLUME ["/var/lib/gap-auditor"]
WORKDIR /var/lib/gap-auditor
USER 10001:10001
EXPOSE 9464

# No curl in the slim image: bash's /dev/tcp asks /healthz for its status line. It assumes
# the default server.listen port 9464; change it here if you change that.
HEALTHCHECK --interval=15s --timeout=5s --start-period=30s --retries=3 \
  CMD ["bash", "-c", "exec 3<>/dev/tcp/127.0.0.1/9464 && printf 'GET /healthz HTTP/1.1\\r\\nHost: localhost\\r\\nConnection: close\\r\\n\\r\\n' >&3 && head -n 1 <&3 | grep -q ' 200 '"]

ENTRYPOINT ["gap-auditor"]
CMD ["run", "-c", "/etc/gap-auditor/gap-auditor.toml"]
