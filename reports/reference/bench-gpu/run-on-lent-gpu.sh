#!/bin/bash
# bench-gpu on the lent GPU machine: wheels -> /tmp/site, random weights for the carried SmolLM2 / MiniLM configs,
# the recipe under a time limit, then everything it wrote (bench.json or bench.partial.json, report, logs) in one tarball.
# Kept as the provenance of this reference. It expects .whl/ (wheels of the versions `make setup` installs, for
# cp312 manylinux x86_64: see the device tool's README) and .gpu/smol, .gpu/minilm (the embedded SmolLM2's and
# MiniLM's files without their weights), both git-excluded; run from the repository root with OUT set.
PY=${PY:-python3}
export HF_HUB_OFFLINE=1 JAX_PLATFORMS=cpu PYTHONUNBUFFERED=1 WORKBENCH_CACHE_DIR=/tmp/wbc TOKENIZERS_PARALLELISM=false
if [ -z "$SKIP_INSTALL" ]; then
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 3
  export PYTHONPATH=/tmp/site:$PWD
fi
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 | head -2
$PY -c "import torch, transformers, datasets, bm25s, fastapi, openai, pyarrow; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.is_available(), 'transformers', transformers.__version__, 'datasets', datasets.__version__, 'pyarrow', pyarrow.__version__)" || exit 4
$PY reports/reference/bench-gpu/random_weights.py .gpu || exit 5
start=$(date +%s)
timeout ${LIMIT:-430} $PY -m workbench run bench-gpu run_dir=/tmp/run-gpu generator.model=$PWD/.gpu/smol \
  embedder.model=$PWD/.gpu/minilm bench_gpu.questions=4 bench_gpu.repeats=2 $EXTRA > $OUT/run.log 2>&1
echo "rc=$? after $(( $(date +%s) - start )) s"
tail -25 $OUT/run.log
mkdir -p /tmp/res && cp -r reports/bench-gpu /tmp/res/ 2>/dev/null
find /tmp/run-gpu -name 'bench*.json' -o -name 'serve-model-*.log' | while read f; do cp "$f" /tmp/res/; done
tar czf $OUT/results.tgz -C /tmp/res . && ls -la /tmp/res
