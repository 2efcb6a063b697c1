# limitproxy: a static binary on an empty image, running as a non-root user.
#   docker build -t limitproxy .
#   docker run -p 8080:8080 -p 9091:9091 -e LIMITPROXY_ADMIN_TOKEN=... \
#     -v $PWD/my.toml:/etc/limitproxy/config.toml limitproxy
# The build step is scripts/build-static.sh, which `make test` also runs
# (with --check: the binary is static and runs), since no Docker engine runs
# where this is developed.
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
RUN scripts/build-static.sh /out/limitproxy "$VERSION"
# The directory the default storage for ACME certificates lives in.
RUN mkdir -p /out/var/lib/limitproxy && chown 65532:65532 /out/var/lib/limitproxy
# [server] temp_dir's default, os.TempDir(): request bodies over 64 KiB and
# buffered answers past their memory are spooled there. The start fails
# without a writable one.
RUN mkdir -p /out/tmp && chmod 1777 /out/tmp

FROM scratch
COPY --from=build /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
COPY --from=build /out/limitproxy /limitproxy
COPY --from=build --chown=65532:65532 /out/var/lib/limitproxy /var/lib/limitproxy
COPY --from=build /out/tmp /tmp
COPY deploy/container.toml /etc/limitproxy/config.toml
# Non-root, numerically (there is no /etc/passwd in scratch).
USER 65532:65532
WORKDIR /var/lib/limitproxy
# The proxy, and the admin API and metrics (deploy/container.toml: on
# :9091, /api/ behind the token in LIMITPROXY_ADMIN_TOKEN).
EXPOSE 8080 9091
# A scratch image has no curl: the binary asks its own admin listener.
HEALTHCHECK --interval=10s --timeout=6s --start-period=5s --retries=3 \
  CMD ["/limitproxy", "health", "-config", "/etc/limitproxy/config.toml"]
ENTRYPOINT ["/limitproxy"]
CMD ["-config", "/etc/limitproxy/config.toml"]
