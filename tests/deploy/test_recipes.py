"""The deployment recipes in deploy/ stay true: every flag they pass to `callgate serve` exists,
the Kubernetes manifests validate against the Kubernetes schemas (kubernetes-validate, strict:
unknown fields are errors), the systemd unit passes `systemd-analyze verify`, and the
Dockerfile's structure is what docs/deployment.md says. The image itself is not built here
(no container engine on these machines)."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
DOCKERFILE = DEPLOY / "Dockerfile"
UNIT = DEPLOY / "callgate-sidecar.service"
KUBE = DEPLOY / "kubernetes"
MANIFESTS = sorted(KUBE.rglob("*.yaml"))
#: the oldest Kubernetes the manifests are written for (pod user namespaces on by default) and
#: the newest schemas kubernetes-validate ships
KUBE_VERSIONS = ("1.33.0", None)
SIDECAR_IMAGE = "callgate-sidecar"
SIDECAR = {"app.kubernetes.io/name": "callgate-sidecar"}
AGENT = {"app.kubernetes.io/name": "agent"}


# ---------------------------------------------------------------- the CLI's own flags


@cache
def serve_flags() -> frozenset[str]:
    """Every option `callgate serve --help` prints."""
    script = Path(sys.executable).with_name("callgate")
    argv = [str(script)] if script.exists() else [
        sys.executable, "-c", "from callgate._entry import main; main()"]
    done = subprocess.run([*argv, "serve", "--help"], capture_output=True, text=True,
                          timeout=60, check=True)
    return frozenset(re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", done.stdout))


def flags_of(args: list[str]) -> list[str]:
    return [a.split("=", 1)[0] for a in args if a.startswith("--")]


def check_flags(args: list[str], where: str) -> None:
    known = serve_flags()
    missing = sorted(set(flags_of(args)) - known)
    if missing == ["--store"]:
        pytest.skip(f"{where} uses --store, the PostgreSQL store's flag (issue 18), which "
                    "`callgate serve --help` does not list yet")
    assert not missing, f"{where}: `callgate serve` has no option {missing}"


def option(args: list[str], name: str) -> str:
    return args[args.index(name) + 1]


def check_listen(args: list[str], where: str) -> int:
    host, _, port = option(args, "--listen").rpartition(":")
    if host not in ("127.0.0.1", "localhost", "::1", "[::1]"):
        assert "--allow-remote" in args, f"{where} listens on {host} without --allow-remote"
    return int(port)


# ---------------------------------------------------------------- Dockerfile


def dockerfile() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    out: list[tuple[str, str]] = []
    pending = ""
    for raw in DOCKERFILE.read_text().splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        line, pending = pending + line, ""
        word, _, rest = line.partition(" ")
        out.append((word.upper(), rest.strip()))
    assert not pending, "the Dockerfile ends inside a continued line"
    return out


def exec_form(text: str) -> list[str]:
    value = json.loads(text)
    assert isinstance(value, list) and all(isinstance(v, str) for v in value), text
    return value


def final_stage() -> list[tuple[str, str]]:
    steps = dockerfile()
    last = max(i for i, (word, _) in enumerate(steps) if word == "FROM")
    return steps[last:]


def test_dockerfile_base_user_and_packages() -> None:
    steps = dockerfile()
    for word, rest in steps:
        if word == "FROM":
            assert re.match(r"python:3\.11-slim(\S*)?( AS \w+)?$", rest), rest
    stage = final_stage()
    users = [rest for word, rest in stage if word == "USER"]
    assert users, "the image must not run as root"
    assert users[-1].split(":")[0] not in ("root", "0"), users[-1]
    runs = " ".join(rest for word, rest in stage if word == "RUN")
    assert re.search(r"apt-get install\b.*\bbubblewrap\b", runs), "bubblewrap for the sandbox"
    installs = " ".join(rest for word, rest in steps if word == "RUN" and "pip install" in rest)
    extras = re.search(r"'\.\[([a-z,-]+)\]'", installs)
    assert extras, "pip install '.[...]' of the source tree"
    wanted = set(extras.group(1).split(","))
    assert {"server", "postgres", "otel"} <= wanted
    declared = set(tomllib_extras())
    assert wanted <= declared, f"extras not in pyproject.toml: {wanted - declared}"


def tomllib_extras() -> list[str]:
    import tomllib

    data = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return list(data["project"]["optional-dependencies"])


def test_dockerfile_copies_what_exists_and_ignores_the_rest() -> None:
    for word, rest in dockerfile():
        if word == "COPY" and not rest.startswith("--from"):
            *sources, _dest = shlex.split(rest)
            for source in sources:
                assert (ROOT / source).exists(), f"COPY {source}: not in the repository"
    ignore = (DEPLOY / "Dockerfile.dockerignore").read_text()
    assert "!src/" in ignore and re.search(r"^\*$", ignore, re.M), "context: only the sources"


def test_dockerfile_entrypoint_flags_exist() -> None:
    stage = final_stage()
    entry = exec_form(next(rest for word, rest in reversed(stage) if word == "ENTRYPOINT"))
    assert entry == ["callgate", "serve"]
    args = exec_form(next(rest for word, rest in reversed(stage) if word == "CMD"))
    check_flags(args, "deploy/Dockerfile")
    port = check_listen(args, "deploy/Dockerfile")
    assert option(args, "--listen").startswith("0.0.0.0:")
    exposed = [rest for word, rest in stage if word == "EXPOSE"]
    assert exposed == [str(port)]
    health = next(rest for word, rest in stage if word == "HEALTHCHECK")
    assert f"http://127.0.0.1:{port}/healthz" in health


# ---------------------------------------------------------------- systemd


def unit_exec_start() -> list[str]:
    text = UNIT.read_text().replace("\\\n", " ")
    line = next(ln for ln in text.splitlines() if ln.startswith("ExecStart="))
    return shlex.split(line.removeprefix("ExecStart="))


def test_unit_flags_exist() -> None:
    argv = unit_exec_start()
    assert argv[0].endswith("/bin/callgate") and argv[1] == "serve", argv[:2]
    check_flags(argv[2:], "deploy/callgate-sidecar.service")
    check_listen(argv[2:], "deploy/callgate-sidecar.service")


def verifiable_unit(tmp_path: Path) -> Path:
    """The unit with ExecStart's program pointing at this environment's callgate (verify
    checks that it is executable); nothing else changed."""
    script = Path(sys.executable).with_name("callgate")
    if not script.exists():
        pytest.skip("no callgate script next to this interpreter")
    program = unit_exec_start()[0]
    path = tmp_path / UNIT.name
    path.write_text(UNIT.read_text().replace(program, str(script)))
    return path


def systemd_analyze() -> str:
    tool = shutil.which("systemd-analyze")
    if tool is None:
        pytest.skip("systemd-analyze is missing (make system-deps installs the systemd package)")
    return tool


def test_unit_passes_systemd_analyze_verify(tmp_path: Path) -> None:
    tool = systemd_analyze()
    unit = verifiable_unit(tmp_path)
    done = subprocess.run([tool, "verify", str(unit)], capture_output=True, text=True,
                          timeout=60, check=False, cwd=tmp_path)
    # verify exits 0 on settings it ignores ("Failed to parse ..., ignoring"): any output fails
    assert done.returncode == 0 and not (done.stdout + done.stderr).strip(), done.stderr


def test_unit_exposure_stays_low(tmp_path: Path) -> None:
    tool = systemd_analyze()
    unit = verifiable_unit(tmp_path)
    done = subprocess.run([tool, "security", "--offline=yes", "--no-pager", str(unit)],
                          capture_output=True, text=True, timeout=60, check=False, cwd=tmp_path)
    level = re.search(r"Overall exposure level for \S+: ([0-9.]+)", done.stdout + done.stderr)
    assert level, done.stdout + done.stderr
    assert float(level.group(1)) <= 3.5, done.stdout


def unit_settings() -> dict[str, str]:
    out: dict[str, str] = {}
    for line in UNIT.read_text().replace("\\\n", " ").splitlines():
        if "=" in line and not line.startswith(("#", "[")):
            key, _, value = line.partition("=")
            out[key] = value
    return out


def test_unit_keeps_what_bubblewrap_needs() -> None:
    s = unit_settings()
    # each of these mounts over /proc, and a user namespace may not mount a fresh proc then
    for key in ("ProtectKernelTunables", "ProtectKernelLogs", "ProtectHostname"):
        assert s.get(key, "no") == "no", key
    assert s.get("ProcSubset", "all") == "all"
    assert set(s["RestrictNamespaces"].split()) >= {"user", "mnt", "pid", "net", "ipc", "uts"}
    assert "AF_NETLINK" in s["RestrictAddressFamilies"].split()
    assert {"@mount", "sethostname"} <= set(s["SystemCallFilter"].split())
    assert s["NoNewPrivileges"] == "yes" and s["CapabilityBoundingSet"] == ""
    assert s["ProtectSystem"] == "strict" and s["User"] != "root"


# ---------------------------------------------------------------- Kubernetes


@cache
def documents() -> tuple[tuple[str, dict[str, Any]], ...]:
    out = []
    for path in MANIFESTS:
        for doc in yaml.safe_load_all(path.read_text()):
            if doc is not None:
                out.append((str(path.relative_to(ROOT)), doc))
    return tuple(out)


def kind(name: str) -> list[dict[str, Any]]:
    return [doc for _, doc in documents() if doc["kind"] == name]


def test_manifests_exist() -> None:
    assert {p.parent.name for p in MANIFESTS} == {"common", "sqlite", "postgresql"}


@pytest.mark.parametrize("version", KUBE_VERSIONS, ids=lambda v: v or "latest")
def test_manifests_validate_against_kubernetes_schemas(version: str | None) -> None:
    kv = pytest.importorskip("kubernetes_validate")
    target = version or kv.latest_version()
    for where, doc in documents():
        try:
            kv.validate(doc, target, strict=True)
        except kv.ValidationError as exc:
            pytest.fail(f"{where} {doc['kind']}/{doc['metadata']['name']}: {exc}")


def test_the_validator_refuses_an_unknown_field() -> None:
    kv = pytest.importorskip("kubernetes_validate")
    doc = json.loads(json.dumps(kind("Service")[0]))
    doc["spec"]["prots"] = doc["spec"].pop("ports")
    with pytest.raises(kv.ValidationError):
        kv.validate(doc, "1.33.0", strict=True)


def sidecar_containers() -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    out = []
    for where, doc in documents():
        if doc["kind"] != "Deployment":
            continue
        pod = doc["spec"]["template"]["spec"]
        for container in pod["containers"]:
            if SIDECAR_IMAGE in container["image"]:
                out.append((where, pod, container))
    return out


@pytest.mark.parametrize("recipe", ["sqlite", "postgresql"])
def test_manifest_flags_exist(recipe: str) -> None:
    found = [(w, c) for w, _, c in sidecar_containers() if f"/{recipe}/" in w]
    assert len(found) == 1
    where, container = found[0]
    args = container["args"]
    port = check_listen(args, where)
    assert container["ports"][0]["containerPort"] == port
    service = kind("Service")[0]["spec"]
    assert service["ports"][0]["port"] == port
    check_flags(args, where)


def test_postgresql_recipe_takes_the_store_from_a_secret_and_out_of_the_arguments() -> None:
    [(_, _, container)] = [x for x in sidecar_containers() if "/postgresql/" in x[0]]
    args = container["args"]
    # the URL (and its password) reaches serve through $CALLGATE_STORE: an argument would
    # show it to every process on the node
    assert "--audit" not in args and "--store" not in args
    assert not any("CALLGATE_STORE" in a or "postgresql" in a for a in args)
    env = {e["name"]: e for e in container["env"]}
    assert "secretKeyRef" in env["CALLGATE_STORE"]["valueFrom"]
    from callgate.cli._serve import serve_command

    [store] = [p for p in serve_command.params if p.name == "store"]
    assert store.envvar == "CALLGATE_STORE"  # what serve reads the variable as
    [secret] = [d for d in kind("Secret") if d["metadata"]["name"] == "callgate-store"]
    assert secret["stringData"]["url"].startswith("postgresql://")
    assert "PLACEHOLDER" in secret["stringData"]["url"]


def test_sqlite_recipe_keeps_its_state_on_a_claim_with_one_writer() -> None:
    [(_, pod, container)] = [x for x in sidecar_containers() if "/sqlite/" in x[0]]
    deployment = next(d for w, d in documents() if "/sqlite/" in w and d["kind"] == "Deployment")
    assert deployment["spec"]["replicas"] == 1
    assert deployment["spec"]["strategy"]["type"] == "Recreate"
    claims = {v["persistentVolumeClaim"]["claimName"]: v["name"]
              for v in pod["volumes"] if "persistentVolumeClaim" in v}
    assert set(claims) == {d["metadata"]["name"] for d in kind("PersistentVolumeClaim")}
    mount = next(m for m in container["volumeMounts"] if m["name"] in claims.values())
    assert option(container["args"], "--audit").startswith(mount["mountPath"] + "/")


def test_policy_configmap_is_a_valid_policy(tmp_path: Path) -> None:
    from callgate.policy._loader import load_policy

    [config] = kind("ConfigMap")
    path = tmp_path / "policy.yaml"
    path.write_text(config["data"]["policy.yaml"])
    assert load_policy(path).policy.name
    for _, _, container in sidecar_containers():
        mount = next(m for m in container["volumeMounts"] if m["name"] == "policy")
        assert option(container["args"], "--policy") == mount["mountPath"] + "/policy.yaml"


def test_keys_secret_is_a_keys_file_that_admits_nobody(tmp_path: Path) -> None:
    from callgate.integrations.sidecar._keys import KeyRing

    [secret] = [d for d in kind("Secret") if d["metadata"]["name"] == "callgate-sidecar-keys"]
    path = tmp_path / "keys.json"
    path.write_text(secret["stringData"]["keys.json"])
    ring = KeyRing(path)
    [agent] = [d for d in kind("Secret") if d["metadata"]["name"] == "callgate-agent-key"]
    assert "PLACEHOLDER" in agent["stringData"]["key"]
    assert ring.identify(agent["stringData"]["key"]) is None


def selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.get("matchLabels", {}).items())


def agent_pods() -> list[dict[str, Any]]:
    return [d for d in kind("Deployment")
            if selects({"matchLabels": AGENT}, d["spec"]["template"]["metadata"]["labels"])]


def test_network_policy_leaves_the_agent_only_the_sidecar_and_dns() -> None:
    policies = kind("NetworkPolicy")
    [deny] = [p for p in policies if p["spec"]["podSelector"] == {}]
    assert set(deny["spec"]["policyTypes"]) == {"Ingress", "Egress"}
    assert "ingress" not in deny["spec"] and "egress" not in deny["spec"]
    [agent_pod] = agent_pods()
    labels = agent_pod["spec"]["template"]["metadata"]["labels"]
    on_agent = [p for p in policies if p["spec"]["podSelector"] != {}
                and selects(p["spec"]["podSelector"], labels)]
    assert len(on_agent) == 1, "policies add up: only one may widen the agent's egress"
    spec = on_agent[0]["spec"]
    assert set(spec["policyTypes"]) == {"Ingress", "Egress"} and spec["ingress"] == []
    sidecar_labels = {**SIDECAR, "app.kubernetes.io/part-of": "callgate"}
    for rule in spec["egress"]:
        ports = {(p["protocol"], p["port"]) for p in rule["ports"]}
        for peer in rule["to"]:
            assert "ipBlock" not in peer, "no address range for the agent"
            if "namespaceSelector" in peer:
                assert peer["namespaceSelector"]["matchLabels"] == {
                    "kubernetes.io/metadata.name": "kube-system"}
                assert peer["podSelector"]["matchLabels"] == {"k8s-app": "kube-dns"}
                assert ports == {("UDP", 53), ("TCP", 53)}
            else:
                assert selects(peer["podSelector"], sidecar_labels)
                assert ports == {("TCP", 8787)}


def test_postgresql_lets_the_sidecars_in_and_nobody_else() -> None:
    policies = kind("NetworkPolicy")
    database = {"app.kubernetes.io/name": "postgresql"}
    on_database = [p for p in policies if p["spec"]["podSelector"] != {}
                   and selects(p["spec"]["podSelector"], database)]
    assert len(on_database) == 1
    [rule] = on_database[0]["spec"]["ingress"]
    assert [peer["podSelector"]["matchLabels"] for peer in rule["from"]] == [SIDECAR]
    assert {(p["protocol"], p["port"]) for p in rule["ports"]} == {("TCP", 5432)}


def test_agent_pod_holds_no_sidecar_secret_and_no_api_token() -> None:
    [agent_pod] = agent_pods()
    pod = agent_pod["spec"]["template"]["spec"]
    assert pod["automountServiceAccountToken"] is False
    secrets = {v.get("secret", {}).get("secretName") for v in pod.get("volumes", [])}
    for container in pod["containers"]:
        assert SIDECAR_IMAGE not in container["image"], "the sidecar runs in its own pod"
        for env in container.get("env", []):
            ref = env.get("valueFrom", {}).get("secretKeyRef")
            if ref:
                secrets.add(ref["name"])
    assert secrets <= {None, "callgate-agent-key"}, secrets


def test_sidecar_labels_match_service_and_policy() -> None:
    [service] = kind("Service")
    [sidecar_policy] = [p for p in kind("NetworkPolicy")
                        if p["spec"]["podSelector"].get("matchLabels") == SIDECAR]
    for _, doc in documents():
        if doc["kind"] == "Deployment" and any(
                SIDECAR_IMAGE in c["image"] for c in doc["spec"]["template"]["spec"]["containers"]):
            labels = doc["spec"]["template"]["metadata"]["labels"]
            assert selects({"matchLabels": service["spec"]["selector"]}, labels)
            assert selects(sidecar_policy["spec"]["podSelector"], labels)
            assert selects(doc["spec"]["selector"], labels)


# ---------------------------------------------------------------- the recipes' argv, started


def recipe_args() -> dict[str, list[str]]:
    [(_, _, container)] = [x for x in sidecar_containers() if "/sqlite/" in x[0]]
    stage = final_stage()
    return {"systemd": unit_exec_start()[2:],
            "docker": exec_form(next(rest for word, rest in reversed(stage) if word == "CMD")),
            "kubernetes-sqlite": list(container["args"])}


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# The Dockerfile's CMD has the Kubernetes recipe's shape (only its paths differ), so two
# starts cover the three recipes' arguments and keep this file fast.
@pytest.mark.parametrize("recipe", ["systemd", "kubernetes-sqlite"])
def test_recipe_arguments_start_a_sidecar(recipe: str, tmp_path: Path) -> None:
    """The recipe's own arguments, every absolute path moved under a temporary root and the
    address moved to a free loopback port, start a sidecar that answers /healthz, refuses the
    placeholder key and stops cleanly on SIGTERM."""
    import signal
    import time
    import urllib.error
    import urllib.request

    pytest.importorskip("uvicorn")
    args = recipe_args()[recipe]
    port = free_port()
    moved = [f"127.0.0.1:{port}" if a.startswith(("0.0.0.0:", "127.0.0.1:")) else
             str(tmp_path / a.lstrip("/")) if a.startswith("/") else a for a in args]
    [config] = kind("ConfigMap")
    [keys] = [d for d in kind("Secret") if d["metadata"]["name"] == "callgate-sidecar-keys"]
    for flag, text in (("--policy", config["data"]["policy.yaml"]),
                       ("--keys", keys["stringData"]["keys.json"])):
        path = Path(option(moved, flag))
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    Path(option(moved, "--working-dir")).mkdir(parents=True, exist_ok=True)
    script = Path(sys.executable).with_name("callgate")
    if not script.exists():
        pytest.skip("no callgate script next to this interpreter")
    server = subprocess.Popen([str(script), "serve", *moved], stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, cwd=tmp_path)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                with urllib.request.urlopen(f"{base}/healthz", timeout=1) as answer:
                    assert answer.status == 200
                break
            except OSError:
                assert server.poll() is None, server.communicate()[0]
                assert time.monotonic() < deadline, "no /healthz within 20 s"
                time.sleep(0.1)
        request = urllib.request.Request(f"{base}/v1/runs", data=b"{}", method="POST",
                                         headers={"Authorization": "Bearer PLACEHOLDER-NOT-A-KEY",
                                                  "Content-Type": "application/json"})
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=5)
        refused.value.close()
        assert refused.value.code == 401
    finally:
        server.send_signal(signal.SIGTERM)
        output = server.communicate(timeout=30)[0]
    assert server.returncode == 0, output
    assert Path(option(moved, "--audit")).exists()
