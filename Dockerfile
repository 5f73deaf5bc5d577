# The presenced server on a small non-root image: a static binary, the CA
# certificates (for -webhook and rediss:// over TLS), nothing else.
#
#   podman build -t presenced .          (or docker build; pulls the Go image)
#   docker run -p 8080:8080 -e PRESENCED_JWT_SECRET=... -e PRESENCED_API_KEY=... presenced
#
# Every flag can be set as PRESENCED_<FLAG> (see README.md); flags after the
# image name win over the variables.

ARG GO_VERSION=1.26

# Names in full: podman resolves no short name without a search registry.
FROM docker.io/library/golang:${GO_VERSION} AS build
WORKDIR /src
# The modules first: this layer stays cached while only the code changes.
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# CGO_ENABLED=0: a static binary, which runs on an image without a libc.
RUN CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o /out/presenced ./cmd/presenced \
 && mkdir -p /out/etc/ssl/certs \
 && cp /etc/ssl/certs/ca-certificates.crt /out/etc/ssl/certs/

FROM scratch
COPY --from=build /out/etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
COPY --from=build /out/presenced /presenced
# A numeric user: scratch has no /etc/passwd. 65532 is distroless's nonroot.
USER 65532:65532
# All interfaces: in demo mode the server would listen on loopback only,
# which nothing outside the container reaches.
ENV PRESENCED_ADDR=:8080
EXPOSE 8080
ENTRYPOINT ["/presenced"]
