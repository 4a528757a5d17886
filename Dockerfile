# syntax=docker/dockerfile:1
# gpushare images. One build stage compiles every binary (cgo on: go-nvml loads libnvidia-ml at run
# time through dlopen, so no NVIDIA library is needed to build). Runtime stages are distroless:
#   docker build -t gpushare .                          # all three binaries (what the Helm chart uses)
#   docker build --target scheduler -t gpushare-scheduler .
#   docker build --target device-plugin -t gpushare-device-plugin .
#   docker build --target inspector -t kubectl-inspect-gpushare .
ARG GO_VERSION=1.26

FROM golang:${GO_VERSION}-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=1 make build BIN=/out

# The extender runs as a non-root user; it needs no privilege at all.
FROM gcr.io/distroless/base-debian12:nonroot AS scheduler
COPY --from=build /out/gpushare-scheduler /usr/local/bin/gpushare-scheduler
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/gpushare-scheduler"]

# The device plugin needs glibc (cgo, dlopen of libnvidia-ml) and root: it writes the kubelet's
# device-plugin socket directory.
FROM gcr.io/distroless/base-debian12 AS device-plugin
COPY --from=build /out/gpushare-device-plugin /usr/local/bin/gpushare-device-plugin
ENTRYPOINT ["/usr/local/bin/gpushare-device-plugin"]

FROM gcr.io/distroless/static-debian12:nonroot AS inspector
COPY --from=build /out/kubectl-inspect-gpushare /usr/local/bin/kubectl-inspect-gpushare
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/kubectl-inspect-gpushare"]

# Default: every binary in one image, non-root by default; the chart's device-plugin DaemonSet runs
# it as root (securityContext), the extender as 65532.
FROM gcr.io/distroless/base-debian12:nonroot AS all
COPY --from=build /out/ /usr/local/bin/
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/gpushare-scheduler"]
