"""deploy/: the Kubernetes manifests validate, the systemd units pass systemd-analyze, and every
command line in them (and the Containerfile's) is one the real CLI accepts."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import typer
import yaml
from typer.testing import CliRunner

from peerwatch.cli import app
from peerwatch.service.config import config_from_dict

REPO = Path(__file__).resolve().parents[1]
DEPLOY = REPO / "deploy"
K8S = DEPLOY / "kubernetes"
UNITS = DEPLOY / "systemd"
CONTAINERFILE = DEPLOY / "container" / "Containerfile"
INSTALLED = "/opt/peerwatch/bin/peerwatch"  # where the units expect peerwatch
K8S_VERSIONS = ("1.28.0", "1.37.0")  # the oldest Kubernetes the manifests claim, and the newest schema here
CRDS = {("monitoring.coreos.com/v1", "PodMonitor")}  # not in the core schemas: checked by hand below


def manifests() -> list[tuple[str, dict[str, Any]]]:
    docs = []
    for path in sorted(K8S.glob("*.yaml")):
        if path.name == "kustomization.yaml":
            continue
        for i, doc in enumerate(yaml.safe_load_all(path.read_text())):
            assert isinstance(doc, dict), f"{path.name} document {i}: not a mapping"
            docs.append((f"{path.name}#{i}", doc))
    return docs


def pod_specs() -> Iterator[tuple[str, dict[str, Any]]]:
    for where, doc in manifests():
        if doc["kind"] in ("Deployment", "DaemonSet"):
            yield where, doc["spec"]["template"]["spec"]


def test_every_manifest_validates_against_the_kubernetes_schemas() -> None:
    docs = manifests()
    kinds = sorted({d["kind"] for _, d in docs})
    assert kinds == ["ConfigMap", "DaemonSet", "Deployment", "Namespace", "PersistentVolumeClaim", "PodMonitor",
                     "Service"]  # fmt: skip
    for where, doc in docs:
        assert doc.get("apiVersion") and doc.get("metadata", {}).get("name"), f"{where}: apiVersion/name missing"
        if doc["kind"] != "Namespace":
            assert doc["metadata"].get("namespace") == "peerwatch", f"{where}: not in the peerwatch namespace"
        if (doc["apiVersion"], doc["kind"]) in CRDS:
            continue
        for version in K8S_VERSIONS:
            kubernetes_validate.validate(doc, version, strict=True)  # raises, naming the bad field


def test_the_validator_catches_a_misspelt_field() -> None:
    _, deployment = next((w, d) for w, d in manifests() if d["kind"] == "Deployment")
    deployment["spec"]["template"]["spec"]["containers"][0]["volumeMount"] = []
    with pytest.raises(kubernetes_validate.ValidationError, match="volumeMount"):
        kubernetes_validate.validate(deployment, K8S_VERSIONS[0], strict=True)


def test_serve_runs_alone_and_the_pieces_refer_to_each_other() -> None:
    docs = {(d["kind"], d["metadata"]["name"]): d for _, d in manifests()}
    serve = docs[("Deployment", "peerwatch-serve")]
    assert serve["spec"]["replicas"] == 1 and serve["spec"]["strategy"]["type"] == "Recreate"  # SQLite: one writer
    for where, pod in pod_specs():
        volumes = {v["name"]: v for v in pod["volumes"]}
        for c in pod["containers"]:
            ports = {p["name"] for p in c["ports"]}
            for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
                if probe in c:
                    assert c[probe]["httpGet"]["port"] in ports, f"{where}: {probe} names an unknown port"
            for mount in c["volumeMounts"]:
                assert mount["name"] in volumes, f"{where}: mount of unknown volume {mount['name']}"
            assert c["resources"]["requests"]["memory"] and c["resources"]["limits"]["memory"]
        for volume in volumes.values():
            if "configMap" in volume:
                assert ("ConfigMap", volume["configMap"]["name"]) in docs
            if "persistentVolumeClaim" in volume:
                assert ("PersistentVolumeClaim", volume["persistentVolumeClaim"]["claimName"]) in docs
    template = serve["spec"]["template"]
    service = docs[("Service", "peerwatch")]
    assert service["spec"]["selector"].items() <= template["metadata"]["labels"].items()
    assert service["spec"]["selector"] == serve["spec"]["selector"]["matchLabels"]
    container_ports = {p["name"]: p["containerPort"] for p in template["spec"]["containers"][0]["ports"]}
    assert [container_ports[p["targetPort"]] for p in service["spec"]["ports"]] == [8080]
    monitor = docs[("PodMonitor", "peerwatch")]
    all_ports = {p["name"] for _, pod in pod_specs() for c in pod["containers"] for p in c["ports"]}
    assert {e["port"] for e in monitor["spec"]["podMetricsEndpoints"]} <= all_ports
    kustomization = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    assert all((K8S / r).is_file() for r in kustomization["resources"])


def test_the_configmap_is_a_valid_configuration_listening_where_the_probes_look() -> None:
    config_map = next(d for _, d in manifests() if d["kind"] == "ConfigMap")
    config = config_from_dict(yaml.safe_load(config_map["data"]["peerwatch.yaml"]), "serve-config.yaml")
    assert config.api.port == 8080 and config.api.host == "0.0.0.0"
    assert config.source.tsdb is not None and config.source.tsdb.tenant == "0"
    secret_mount = next(
        m["mountPath"] for _, pod in pod_specs() for c in pod["containers"] for m in c["volumeMounts"]
        if m["name"] == "secrets"
    )  # fmt: skip
    assert str(config.api.token_file).startswith(secret_mount + "/")
    assert str(config.store.sqlite).startswith("/var/lib/peerwatch/")


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl not installed: kustomize build not checked")
def test_kustomize_builds() -> None:
    out = subprocess.run(["kubectl", "kustomize", str(K8S)], capture_output=True, text=True, check=True).stdout
    kinds = [d["kind"] for d in yaml.safe_load_all(out)]
    assert sorted(kinds) == ["ConfigMap", "DaemonSet", "Deployment", "Namespace", "PersistentVolumeClaim", "Service"]


# -- command lines ---------------------------------------------------------------------------


def command_lines() -> list[tuple[str, list[str]]]:
    """Every peerwatch command line in deploy/: (where, arguments after ``peerwatch``)."""
    found: list[tuple[str, list[str]]] = []
    for unit in sorted(UNITS.glob("*.service")):
        for line in unit.read_text().splitlines():
            if line.startswith("ExecStart="):
                argv = shlex.split(line.removeprefix("ExecStart="))
                assert argv[0] == INSTALLED, f"{unit.name}: runs {argv[0]}, not {INSTALLED}"
                found.append((unit.name, argv[1:]))
    for where, pod in pod_specs():
        for c in pod["containers"]:
            found.append((where, [str(a) for a in c.get("command", [])[1:] + c["args"]]))
    text = CONTAINERFILE.read_text()
    entrypoint = json.loads(re.search(r"^ENTRYPOINT (\[.*\])$", text, re.M).group(1))  # type: ignore[union-attr]
    assert entrypoint == ["peerwatch"]
    found.append(("Containerfile CMD", json.loads(re.search(r"^CMD (\[.*\])$", text, re.M).group(1))))  # type: ignore[union-attr]
    return found


def test_every_command_line_is_accepted_by_the_cli() -> None:
    lines = command_lines()
    assert len(lines) == 6 and {args[0] for _, args in lines} == {"serve", "agent"}
    commands = subcommands()
    for where, args in lines:
        assert args[0] in commands, f"{where}: no command {args[0]!r}"
        try:  # parses and converts every option as a run would, without running it
            commands[args[0]].make_context(f"peerwatch {args[0]}", args[1:])
        except Exception as exc:  # typer's own copy of click's UsageError / BadParameter
            pytest.fail(f"{where}: peerwatch {shlex.join(args)}: {exc}")
        result = CliRunner().invoke(app, [*args, "--help"])
        assert result.exit_code == 0 and "Usage:" in result.output, f"{where}: {result.output}"


def test_a_wrong_flag_or_value_is_caught() -> None:
    agent = subcommands()["agent"]
    with pytest.raises(Exception, match="No such option"):
        agent.make_context("peerwatch agent", ["--listen", "0.0.0.0:9835"])
    with pytest.raises(Exception, match="valid number"):
        agent.make_context("peerwatch agent", ["--interval", "1m"])


def subcommands() -> dict[str, Any]:
    """peerwatch's subcommands by name (typer's click objects), those imported when named too."""
    group: Any = typer.main.get_command(app)
    ctx = typer.Context(group)
    return {name: group.get_command(ctx, name) for name in group.list_commands(ctx)}


# -- systemd ---------------------------------------------------------------------------------


def test_systemd_units_pass_systemd_analyze_verify(tmp_path: Path) -> None:
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze not installed (apt-get install systemd): units not verified")
    # verify checks that ExecStart's binary exists: point the copies at this environment's peerwatch.
    here = Path(sys.executable).parent / "peerwatch"
    assert here.is_file(), f"no peerwatch script beside {sys.executable}"
    units = sorted(UNITS.glob("*.service")) + sorted(UNITS.glob("*.timer"))
    assert {u.name for u in units} >= {"peerwatch-serve.service", "peerwatch-agent.service"}
    for unit in units:
        (tmp_path / unit.name).write_text(unit.read_text().replace(INSTALLED, str(here)))
    result = subprocess.run(
        [analyze, "verify", *(str(tmp_path / u.name) for u in units)], capture_output=True, text=True, timeout=60
    )
    # verify exits 0 on unknown keys and bad values: any word from it is a finding.
    assert result.returncode == 0 and not (result.stdout + result.stderr).strip(), result.stdout + result.stderr


def test_serve_unit_is_hardened() -> None:
    settings = {}
    for line in (UNITS / "peerwatch-serve.service").read_text().splitlines():
        key, sep, value = line.partition("=")
        if sep and not line.startswith("#"):
            settings[key] = value
    assert settings["User"] == "peerwatch" and settings["NoNewPrivileges"] == "yes"
    assert settings["ProtectSystem"] == "strict" and settings["CapabilityBoundingSet"] == ""
    assert settings["StateDirectory"] == "peerwatch"


# -- container image -------------------------------------------------------------------------


def test_containerfile_runs_peerwatch_as_a_user_on_debian_with_a_healthcheck() -> None:
    text = CONTAINERFILE.read_text()
    bases = re.findall(r"^ARG PYTHON_IMAGE=(\S+)$", text, re.M)
    assert bases and re.search(r"python:3\.1[1-9]-slim-(bookworm|trixie)$", bases[0]), bases
    users = re.findall(r"^USER (\S+)$", text, re.M)
    assert users and not users[-1].startswith(("0", "root")), users
    health = re.search(r"^HEALTHCHECK .*\n\s+CMD (\[.*\])$", text, re.M)
    assert health is not None and "PEERWATCH_HEALTH_URL" in health.group(1)
    assert "PEERWATCH_HEALTH_URL=http://127.0.0.1:8080/healthz" in text
    assert '@app.get("/healthz")' in (REPO / "src" / "peerwatch" / "service" / "app.py").read_text()
    for source in re.findall(r"^COPY (?!--from)(.+) \S+$", text, re.M):
        for item in source.split():
            assert (REPO / item).exists(), f"Containerfile copies {item}, which the repository lacks"


def test_what_the_image_copies_installs_peerwatch_with_its_data(tmp_path: Path) -> None:
    """The image's install step (``pip install .`` of the files it copies) as a wheel: every data
    file under src/peerwatch is in it (a pattern missing from package-data would leave the image
    without its catalogue or the dashboard's assets) and the ``peerwatch`` command is declared."""
    copied = [item for source in re.findall(r"^COPY (?!--from)(.+) \S+$", CONTAINERFILE.read_text(), re.M)
              for item in source.split()]  # fmt: skip
    context = tmp_path / "context"
    for item in copied:
        src = REPO / item
        if src.is_dir():
            shutil.copytree(src, context / item, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
        else:
            context.mkdir(exist_ok=True)
            shutil.copy(src, context / item)
    result = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(tmp_path / "wheel"), str(context)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    (wheel,) = (tmp_path / "wheel").glob("peerwatch-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        entry_points = next(archive.read(n).decode() for n in names if n.endswith(".dist-info/entry_points.txt"))
    package = REPO / "src" / "peerwatch"
    data = {
        f"peerwatch/{p.relative_to(package).as_posix()}"
        for p in package.rglob("*")
        if p.is_file() and p.suffix not in (".py", ".pyc") and "__pycache__" not in p.parts
    }
    assert data and data - names == set(), "data files the image would lack"
    assert "peerwatch = peerwatch.cli:app" in entry_points


def test_a_stopped_serve_frees_its_lease_for_a_pod_on_another_host(tmp_path: Path) -> None:
    """The Deployment's Recreate: the old pod stops cleanly, the new one (another host name) starts at once."""
    from peerwatch.alarms.stores import open_store
    from peerwatch.service.runner import Service

    store_path = tmp_path / "s.sqlite"
    config = config_from_dict({"source": {"tsdb": {"url": "http://127.0.0.1:1"}}, "store": {"sqlite": str(store_path)}})
    old = Service(config)
    assert old.lease() is None
    other = open_store(config.store)
    try:
        assert other.claim("serve_lease", "new-pod:1", time.time(), 120.0) == old.owner  # held while it runs
        old.stop()
        assert other.claim("serve_lease", "new-pod:1", time.time(), 120.0) is None
        old.stop()  # a second stop must not take the lease back from the successor
        assert other.claim("serve_lease", "elsewhere:2", time.time(), 120.0) == "new-pod:1"
    finally:
        other.close()
        old.store.close()
