"""TLS: a master on HTTPS with a certificate signed by a private CA (made here with the
``cryptography`` package), an agent and the CLI that verify it with the CA bundle, and a
short experiment whose trial reports to the master over HTTPS too.

Without the bundle both the CLI and the agent refuse the master: the CLI exits 1 with a
one-line error naming ``--cert-file`` (no traceback) and the agent logs why and never
registers.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from deployer import deployer_identity_args

from dauntless._tls import make_verify

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]

SHORT = """
name: tls-digits
entrypoint: model_def:DigitsTrial
hyperparameters: {global_batch_size: 32, lr: 0.003, hidden_size: 16, dropout: 0.0, optimizer: adam}
data: {validation_fraction: 0.2, split_seed: 0}
records_per_epoch: 1438
searcher: {name: single, metric: accuracy, smaller_is_better: false, max_length: {batches: 20}}
min_validation_period: {batches: 20}
scheduling_unit: 10
max_restarts: 0
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def make_ca_and_server_cert(directory: Path) -> tuple[Path, Path, Path]:
    """(ca.pem, server.pem, server.key): a CA and a server certificate it signed for
    127.0.0.1 and localhost, valid for a day."""
    x509 = pytest.importorskip("cryptography.x509")
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = dt.datetime.now(dt.timezone.utc)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "dauntless test CA")])
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(
            x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]
            ),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False
        )
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    ca_pem, cert_pem, key_pem = (directory / n for n in ("ca.pem", "server.pem", "server.key"))
    ca_pem.write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    cert_pem.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_pem.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    key_pem.chmod(0o600)
    return ca_pem, cert_pem, key_pem


def _agent_takes_secret() -> bool:
    out = subprocess.run(
        [sys.executable, "-m", "dauntless.agent", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    return "--cluster-secret-file" in out.stdout


class TLSCluster:
    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.ca, cert, key = make_ca_and_server_cert(tmp)
        self.port = free_port()
        self.url = f"https://127.0.0.1:{self.port}"
        self.data_dir = tmp / "data"
        self.config = tmp / "master.yaml"
        self.config.write_text(
            f"port: {self.port}\ndata_dir: {self.data_dir}\nagent_timeout: 30\n"
            f"security:\n  tls:\n    cert: {cert}\n    key: {key}\n"
        )
        self.procs: list[subprocess.Popen] = []
        self.logs: list[Path] = []

    def env(self, **extra: str) -> dict[str, str]:
        import os

        env = {
            k: v
            for k, v in os.environ.items()
            if k
            not in ("DET_MASTER", "DET_USER", "DET_PASS", "DET_USER_TOKEN", "DET_MASTER_CERT_FILE")
        }
        env.update(PYTHONUNBUFFERED="1", XDG_CONFIG_HOME=str(self.tmp / "config"), **extra)
        return env

    def spawn(self, name: str, cmd: list[str]) -> tuple[subprocess.Popen, Path]:
        log = self.tmp / f"{name}.log"
        self.logs.append(log)
        proc = subprocess.Popen(
            cmd,
            stdout=log.open("w"),
            stderr=subprocess.STDOUT,
            env=self.env(),
            start_new_session=True,
        )
        self.procs.append(proc)
        return proc, log

    def start_master(self) -> None:
        proc, log = self.spawn(
            "master",
            [
                sys.executable,
                "-m",
                "dauntless.master",
                "--config-file",
                str(self.config),
                *deployer_identity_args(),
                "--allow-artificial-slots",
                # The task services' origin on a free port: the default (the master's
                # port + 1) may belong to another process (it did in a full-suite run).
                "--proxy-port",
                "0",
            ],
        )
        verify = make_verify(str(self.ca))
        until = time.time() + self.deadline(60)
        while time.time() < until:
            if proc.poll() is not None:
                raise AssertionError(f"master exited early:\n{log.read_text()}")
            try:
                httpx.get(self.url + "/api/v1/master", timeout=2, verify=verify).raise_for_status()
                return
            except httpx.HTTPError:
                time.sleep(0.2)
        raise AssertionError(f"master did not answer on HTTPS in time:\n{log.read_text()}")

    def agent_cmd(self, agent_id: str, *extra: str) -> list[str]:
        cmd = [
            sys.executable,
            "-m",
            "dauntless.agent",
            "--master-url",
            self.url,
            "--agent-id",
            agent_id,
            "--work-dir",
            str(self.tmp / agent_id),
            "--artificial-slots",
            "1",
            "--heartbeat-interval",
            "0.2",
            *extra,
        ]
        secret = self.data_dir / "cluster_secret"
        if secret.is_file() and _agent_takes_secret():  # masters that authenticate agents
            cmd += ["--cluster-secret-file", str(secret)]
        return cmd

    def det(self, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "dauntless.cli.main", "-m", self.url, *args],
            cwd=REPO,
            env=env or self.env(),
            capture_output=True,
            text=True,
            timeout=120,
        )

    def dump(self) -> str:
        return "\n".join(
            f"===== {p.name}\n{p.read_text()[-8000:]}" for p in self.logs if p.exists()
        )

    def shutdown(self) -> None:
        import os
        import signal

        for proc in reversed(self.procs):
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(20)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait(10)


@pytest.fixture()
def tls_cluster(tmp_path, request, deadline):
    c = TLSCluster(tmp_path)
    c.deadline = deadline
    yield c
    c.shutdown()
    rep = getattr(request.node, "rep_call", None)
    if rep is not None and rep.failed:
        print(c.dump())


def test_https_master_agent_cli_and_trial_verify_with_the_ca_bundle(
    tls_cluster, tmp_path, deadline
):
    c = tls_cluster
    c.start_master()
    ca = str(c.ca)

    # The CLI without the bundle refuses the master, with a clear one-line error.
    refused = c.det("experiment", "list")
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert "could not be verified" in refused.stderr and "--cert-file" in refused.stderr
    assert "Traceback" not in refused.stderr

    # An agent without the bundle never registers, and says why.
    bad, bad_log = c.spawn("agent-nobundle", c.agent_cmd("agent-nobundle"))
    until = time.time() + deadline(30)
    while "could not be verified" not in bad_log.read_text() and time.time() < until:
        assert bad.poll() is None, bad_log.read_text()
        time.sleep(0.2)
    assert "could not be verified" in bad_log.read_text(), c.dump()
    assert "Traceback" not in bad_log.read_text()

    # The agent with the bundle registers; the CLI with --cert-file (or the env var) works.
    c.spawn("agent-1", c.agent_cmd("agent-1", "--master-cert-file", ca))
    until = time.time() + deadline(60)
    agents: dict = {}
    while time.time() < until:
        out = c.det("--cert-file", ca, "agent", "list", "--json")
        assert out.returncode == 0, out.stderr + c.dump()
        agents = {a["id"]: a for a in json.loads(out.stdout)["agents"]}
        if agents.get("agent-1", {}).get("state") == "ACTIVE":
            break
        time.sleep(0.5)
    assert agents.get("agent-1", {}).get("state") == "ACTIVE", c.dump()
    assert "agent-nobundle" not in agents
    listed = c.det("experiment", "list", env=c.env(DET_MASTER_CERT_FILE=ca))
    assert listed.returncode == 0, listed.stderr

    # A short experiment: the trial reports metrics and checkpoints over HTTPS.
    cfg = tmp_path / "short.yaml"
    cfg.write_text(SHORT)
    created = c.det("--cert-file", ca, "experiment", "create", str(cfg), "examples/digits")
    assert created.returncode == 0, created.stderr + c.dump()
    exp_id = int(created.stdout.split("Created experiment")[1].split()[0])
    until = time.time() + deadline(240)
    state = None
    while time.time() < until:
        out = c.det("--cert-file", ca, "experiment", "describe", str(exp_id), "--json")
        assert out.returncode == 0, out.stderr
        body = json.loads(out.stdout)
        state = body["experiment"]["state"]
        if state in ("COMPLETED", "ERROR", "CANCELED"):
            break
        time.sleep(1.0)
    logs = (
        c.det("--cert-file", ca, "trial", "logs", str(body["trials"][0]["id"])).stdout
        if body.get("trials")
        else ""
    )
    assert state == "COMPLETED", f"{state}\n{logs}\n{c.dump()}"
    trial = body["trials"][0]
    assert trial["total_batches"] == 20
    assert trial["latest_validation"] is not None
