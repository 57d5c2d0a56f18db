# The operator image, for users with a registry: the static kvcache binary on distroless/static,
# running as uid/gid 65532 with no shell. hack/images.sh writes the same image (same build, same
# files, same configuration) as an archive on machines without a container engine; change both
# together.
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# The version printed by `kvcache version`: the chart's appVersion unless --build-arg VERSION=...
ARG VERSION=""
RUN version="${VERSION:-$(sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\} *$/\1/p' charts/kvcache-operator/Chart.yaml)}" && \
    test -n "$version" && \
    CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=${version}" -o /out/kvcache ./cmd/kvcache

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/kvcache /usr/local/bin/kvcache
# The chart runs `kvcache` by name, so the binary is on PATH.
ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt
WORKDIR /home/nonroot
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/kvcache"]
