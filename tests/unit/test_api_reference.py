"""The SDK's API reference (scripts/api_reference.py, pdoc): it covers every public module and every public name of
`groupcoord.client`, and each of those names has a docstring of its own."""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import subprocess
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "api_reference.py"


def script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("api_reference", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_module_of_the_sdk_is_public_or_named_internal():
    modules = {f"groupcoord.client.{p.stem}" for p in (ROOT / "client").glob("*.py") if p.stem != "__init__"}
    api = script()
    assert set(api.PUBLIC) | set(api.INTERNAL) == modules | {"groupcoord.client"}
    assert not set(api.PUBLIC) & set(api.INTERNAL)


def test_every_public_name_has_a_docstring_of_its_own():
    import groupcoord.client as client

    missing = []
    for name in client.__all__:
        obj = getattr(client, name)
        if (inspect.isclass(obj) or inspect.isfunction(obj)) and not obj.__doc__:
            missing.append(name)
    assert not missing, missing


def test_the_reference_is_written_for_every_public_module(tmp_path):
    made = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert made.returncode == 0, made.stdout + made.stderr
    for module in script().PUBLIC:
        page = tmp_path / (module.replace(".", "/") + ".html")
        assert page.is_file(), module
    member = (tmp_path / "groupcoord/client/member.html").read_text()
    assert "GroupMember" in member and "wait_stable" in member and "bootstrap_timeout_ms" in member
    errors = (tmp_path / "groupcoord/client/errors.html").read_text()
    assert all(name in errors for name in ("BootstrapUnreachable", "CommitFailed", "FencedInstanceId"))
