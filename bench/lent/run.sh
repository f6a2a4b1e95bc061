#!/bin/bash
# The prepared run on a lent GPU machine (see README.md beside this file): the CPU class there,
# the CUDA check, and the engine benchmark on its CPU at make run's thread count (cores - 1).
set -u
export PYTHONUNBUFFERED=1 PYTHONWARNINGS=ignore
echo "== machine"
lscpu | grep -E "Model name|^CPU\(s\)|Thread|Socket"
grep -o -E "avx512[a-z_]*|amx[a-z_]*|avx2|avx_vnni" /proc/cpuinfo | sort -u | tr '\n' ' '; echo
nvidia-smi -L; python3 -c "import torch; print('torch', torch.__version__, torch.cuda.is_available())"
echo "== install"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .dev/whl/*.whl || exit 1
tar xzf .dev/lcpp.tgz -C /tmp/site || exit 1
export PYTHONPATH=/tmp/site
cat /tmp/m1 .dev/m2 > /tmp/model.gguf || { echo "the first half is missing: the machine was not warm"; exit 3; }
[ "$(sha256sum /tmp/model.gguf | cut -c1-64)" = "$(cat .dev/model.sha)" ] || { echo "the model's checksum differs"; exit 3; }
export SWITCHYARD_MODEL_PATH=/tmp/model.gguf
python3 -c "from switchyard.libs.engine import native; print('native kernels:', native.available(), native.unavailable_reason())"
echo "== gpu check"
timeout 200 python3 bench/gpu_check.py --out "$OUT/gpu.md" --streams 1,32,128 2>&1 | tail -40
echo "== cpu engine bench"
threads=$(( $(nproc) - 1 ))
SWITCHYARD_ENGINE_THREADS=$threads timeout 300 python3 bench/engine_bench.py --out "$OUT/cpu.md" \
  --dtypes auto,native@avx512 --streams 1,8,32 --max-tokens 32 --rounds 1 --no-sweep 2>&1 | tail -60
