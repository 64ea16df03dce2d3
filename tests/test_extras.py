"""What each install needs: the CLI and `analyze` run without the `serve` and `postgres` extras."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from typer.testing import CliRunner

from peerwatch.cli import app

REPO = Path(__file__).resolve().parents[1]


def test_core_dependencies_leave_the_server_and_test_tools_to_extras() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    core = " ".join(project["dependencies"])
    for heavy in ("fastapi", "uvicorn", "psycopg", "playwright", "pytest"):
        assert heavy not in core, f"{heavy} is installed by every user"
    assert "playwright" not in " ".join(project["optional-dependencies"]["serve"])


def test_the_cli_and_its_offline_commands_import_no_server_or_driver() -> None:
    code = (
        "import sys; from peerwatch.cli import app; import peerwatch.engine, peerwatch.agent.readers; "
        "bad = sorted(m for m in ('fastapi', 'uvicorn', 'psycopg', 'starlette') if m in sys.modules); print(bad)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_demo_without_the_serve_extra_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "uvicorn", None)  # an import of it raises ImportError, as when not installed
    result = CliRunner().invoke(app, ["demo", "--port", "1"])
    assert result.exit_code == 2
    assert "pip install 'peerwatch[serve]'" in result.output
