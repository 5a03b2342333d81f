# pagedviz on the CPU: slim Python, CPU torch, a non-root user, a health check on /healthz.
FROM python:3.11-slim
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY core core
COPY app app
COPY record record
COPY templates templates
COPY static static
COPY plots plots
COPY notebook notebook
COPY scripts/docker-install.sh scripts/docker-install.sh
RUN TORCH_INDEX_URL="$TORCH_INDEX_URL" bash scripts/docker-install.sh python /src \
    && useradd --create-home --uid 10001 pagedviz
USER pagedviz
WORKDIR /home/pagedviz
EXPOSE 8000
HEALTHCHECK --interval=30s --timeout=5s --start-period=20s --retries=3 \
  CMD python -c "import sys, urllib.request; sys.exit(urllib.request.urlopen('http://127.0.0.1:8000/healthz', timeout=4).status != 200)"
CMD ["pagedviz", "serve", "--host", "0.0.0.0", "--port", "8000"]
