# The operator image: torchjob and its runtime dependencies only (no torch).
#   docker build -t torchjob/operator:0.1.0 .
# Without a Docker engine, `scripts/dev-cluster.sh operator-image` builds the same image (hack/operator-image/build.py
# reads this file; tests/kube/test_operator_image.py keeps the two together).
FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
COPY pyproject.toml README.md /src/
COPY constraints/operator.txt /src/constraints/
COPY src /src/src
# Every package pinned, the build backend too (scripts/lock-operator.sh writes the file; PIP_CONSTRAINT
# reaches pip's isolated build environment): two builds of one commit install the same versions.
RUN PIP_CONSTRAINT=/src/constraints/operator.txt pip install --no-cache-dir /src && rm -rf /src
# A numeric user, so that runAsNonRoot can check it; the root filesystem may be read-only.
USER 65532:65532
ENTRYPOINT ["torchjob"]
CMD ["operator", "--leader-elect"]
