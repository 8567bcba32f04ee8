# ojsd in a container: `docker build -t ojsd .`, then
#   docker run -d --name ojsd -p 7419:7419 -p 7420:7420 -v ojsd-data:/var/lib/ojsd \
#     -e OJSD_PASSWORD=... ojsd
# Flags after the image name are passed to ojsd; OJSD_* variables work as usual.
#
# The binary is a glibc build on Debian 12 (bookworm) slim, not a static musl one: the
# machine this was written on cannot install the musl target's standard library (no access
# to the Rust toolchain server), so a musl build of ojsd (with mimalloc's C code) has never
# been run or tested, while this glibc build is the one the tests exercise. It needs only
# libc, libm and libgcc_s, which the slim image has. rust:1.95 is the tested toolchain.

FROM rust:1.95-bookworm AS build
WORKDIR /src
COPY . .
# --locked: the versions of Cargo.lock, as tested. Debug info is dropped (the release
# profile keeps it for profiling) but symbols stay, for readable backtraces.
RUN CARGO_PROFILE_RELEASE_STRIP=debuginfo \
    cargo build --release --locked --bin ojsd \
 && install -m 0755 target/release/ojsd /ojsd

FROM debian:bookworm-slim
RUN useradd --system --uid 10001 --user-group --home-dir /var/lib/ojsd \
        --shell /usr/sbin/nologin ojsd \
 && install -d -o ojsd -g ojsd -m 0700 /var/lib/ojsd
COPY --from=build /ojsd /usr/local/bin/ojsd
# Inside the container ojsd listens on every interface (publish the ports with -p) and
# keeps its data in the volume. Without OJSD_PASSWORD both listeners are open to anyone
# who can reach the published ports, the HTTP admin API included.
ENV OJSD_LISTEN=0.0.0.0:7419 \
    OJSD_HTTP_LISTEN=0.0.0.0:7420 \
    OJSD_DATA_DIR=/var/lib/ojsd
VOLUME /var/lib/ojsd
EXPOSE 7419 7420
USER ojsd
# SIGTERM (docker stop's signal) makes ojsd commit its last batch and exit 0; give it
# longer than docker's default 10 s with `docker stop -t 30` if batches are large.
STOPSIGNAL SIGTERM
# The HTTP health route answers 503 when the engine does not; bash's /dev/tcp spares the
# image a curl. (With --http-listen off this check fails: drop it with --no-healthcheck.)
HEALTHCHECK --interval=15s --timeout=5s --start-period=60s --retries=3 \
    CMD ["bash", "-c", "exec 3<>/dev/tcp/127.0.0.1/7420 && printf 'GET /ojs/v1/health HTTP/1.0\\r\\nHost: localhost\\r\\n\\r\\n' >&3 && head -n 1 <&3 | grep -q ' 200 '"]
ENTRYPOINT ["/usr/local/bin/ojsd"]
