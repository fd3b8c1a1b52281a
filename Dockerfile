# syntax=docker/dockerfile:1
#
# Worker image of beam-pipeline for Dataflow and portable runners (Flink, Spark): the Beam
# Python SDK harness with this project and its locked dependencies installed, so workers
# start without installing anything (no --setup_file needed).
#
#   docker build -t IMAGE .                  # CPU workers (the default, last stage)
#   docker build --target gpu -t IMAGE .     # GPU workers (CUDA 12.5 + cuDNN 9: TF 2.21's build)
#   docker push IMAGE
#   python -m beam_pipeline --runner=DataflowRunner --sdk_container_image=IMAGE ...
#
# The Beam version (2.77.0) and the Python version (3.11) must be those of requirements.lock
# and of the launching environment: Beam refuses a worker whose SDK differs from the
# launcher's. tests/test_packaging.py checks this file against the lock.

# The Beam SDK image: the CPU workers' base, and the source of the boot entrypoint.
FROM apache/beam_python3.11_sdk:2.77.0 AS beam_sdk


# --- GPU workers: CUDA base image + Python 3.11 + the Beam boot binary ---------------------
# As Beam documents for custom containers: any base image, with the SDK's /opt/apache/beam
# copied in and /opt/apache/beam/boot as the entrypoint. CUDA 12.5 and cuDNN 9 are what
# TensorFlow 2.21 was built against; on Dataflow the NVIDIA driver comes from the VM
# (accelerator hint `...;install-nvidia-driver`) and is mounted under /usr/local/nvidia,
# which this image's LD_LIBRARY_PATH already names.
FROM nvidia/cuda:12.5.1-cudnn-runtime-ubuntu22.04 AS gpu
ENV DEBIAN_FRONTEND=noninteractive \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1
RUN apt-get update \
    && apt-get install -y --no-install-recommends software-properties-common gpg-agent \
    && add-apt-repository -y ppa:deadsnakes/ppa \
    && apt-get update \
    && apt-get install -y --no-install-recommends python3.11 python3.11-venv \
    && rm -rf /var/lib/apt/lists/*
# The boot binary runs `python` from PATH: the venv's. Beam's boot would otherwise create a
# fresh virtual environment per worker that cannot see this one's packages.
RUN python3.11 -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH \
    RUN_PYTHON_SDK_IN_DEFAULT_ENVIRONMENT=1
WORKDIR /opt/beam_pipeline
COPY requirements.lock ./
RUN pip install -r requirements.lock
# XLA (Keras 3 jit-compiles a model's steps on GPU by default) needs ptxas and libdevice,
# which the CUDA runtime image lacks: NVIDIA's nvcc wheel for the same CUDA 12.5 carries
# both, and XLA_FLAGS points XLA at them (ptxas also on PATH).
RUN pip install nvidia-cuda-nvcc-cu12==12.5.82
ENV XLA_FLAGS=--xla_gpu_cuda_data_dir=/opt/venv/lib/python3.11/site-packages/nvidia/cuda_nvcc \
    PATH=/opt/venv/lib/python3.11/site-packages/nvidia/cuda_nvcc/bin:$PATH
COPY setup.py ./
COPY beam_pipeline ./beam_pipeline
COPY transforms ./transforms
COPY trainer ./trainer
RUN pip install --no-deps . \
    && python -c "import apache_beam, tensorflow, beam_pipeline, transforms, trainer" \
    && ptxas --version \
    && test -f "${XLA_FLAGS#*=}/nvvm/libdevice/libdevice.10.bc"
COPY --from=beam_sdk /opt/apache/beam /opt/apache/beam
ENTRYPOINT ["/opt/apache/beam/boot"]


# --- CPU workers (default target) ----------------------------------------------------------
FROM beam_sdk AS cpu
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    RUN_PYTHON_SDK_IN_DEFAULT_ENVIRONMENT=1
WORKDIR /opt/beam_pipeline
# Dependencies first (a layer reused until the lock changes), then the project itself.
COPY requirements.lock ./
RUN pip install -r requirements.lock
COPY setup.py ./
COPY beam_pipeline ./beam_pipeline
COPY transforms ./transforms
COPY trainer ./trainer
RUN pip install --no-deps . \
    && python -c "import apache_beam, tensorflow, beam_pipeline, transforms, trainer"
# The SDK image's entrypoint (/opt/apache/beam/boot) is kept.
