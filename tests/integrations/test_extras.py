"""Each framework adapter is an optional extra of the SDK: it imports only the SDK, the
standard library and its own framework, the extra installs only that framework (and no
torch), and importing the SDK or ``memmachine_sdk.integrations`` loads no framework."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
import tomllib

from tests.conftest import REPO_ROOT

INTEGRATIONS = REPO_ROOT / "sdk" / "memmachine_sdk" / "integrations"
#: module -> (its extra, the distribution the extra installs, the import root it may use)
ADAPTERS = {
    "langgraph": ("langgraph", "langgraph", "langgraph"),
    "langchain": ("langchain", "langchain-core", "langchain_core"),
    "openai_agents": ("openai-agents", "openai-agents", "agents"),
    "llama_index": ("llama-index", "llama-index-core", "llama_index"),
}
FRAMEWORKS = sorted(root for _, _, root in ADAPTERS.values())


def imported_roots(source: str) -> set[str]:
    roots = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            roots.add(node.module.split(".")[0])
    return roots


def test_each_adapter_imports_only_its_own_framework() -> None:
    base = set(sys.stdlib_module_names) | {"httpx", "pydantic", "memmachine_sdk"}
    modules = {path.stem: path for path in INTEGRATIONS.glob("*.py")}
    assert set(modules) == {"__init__", "_bridge", *ADAPTERS}
    for name, path in modules.items():
        allowed = base | ({ADAPTERS[name][2]} if name in ADAPTERS else set())
        assert imported_roots(path.read_text()) <= allowed, name


def test_each_extra_installs_only_its_framework() -> None:
    project = tomllib.loads((REPO_ROOT / "sdk" / "pyproject.toml").read_text())["project"]
    extras = {
        extra: [re.split(r"[<>=!~\[ ;]", dep, maxsplit=1)[0] for dep in deps]
        for extra, deps in project["optional-dependencies"].items()
    }
    assert extras == {extra: [dist] for extra, dist, _ in ADAPTERS.values()}


def test_no_extra_pulls_torch_into_the_lock() -> None:
    """The lock's closure of every extra: no torch, no CUDA wheels."""
    lock = tomllib.loads((REPO_ROOT / "uv.lock").read_text())
    packages = {package["name"]: package for package in lock["package"]}
    todo = [
        dep["name"]
        for deps in packages["memmachine-sdk"].get("optional-dependencies", {}).values()
        for dep in deps
    ]
    seen: set[str] = set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        package = packages[name]
        todo.extend(dep["name"] for dep in package.get("dependencies", []))
    assert {"langgraph", "langchain-core", "openai-agents", "llama-index-core"} <= seen
    heavy = sorted(n for n in seen if n in {"torch", "triton"} or n.startswith("nvidia-"))
    assert heavy == []


def test_importing_the_sdk_or_the_integrations_package_loads_no_framework() -> None:
    script = (
        "import sys, memmachine_sdk, memmachine_sdk.integrations\n"
        f"print(sorted({{m.split('.')[0] for m in sys.modules}} & set({FRAMEWORKS!r})))"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"
