"""Agent to service over HTTPS: `devicedeck serve --ssl-certfile/--ssl-keyfile` with a
certificate from a CA made here, an agent that trusts that CA with --ca-file, and one that does
not. All real processes."""

from __future__ import annotations

import ssl
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from .helpers import DEVICEDECK, GPU, Api, Process, Service, SimNode, base_env, counts, wait_until

pytestmark = pytest.mark.slow


def openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def make_certificates(directory: Path) -> tuple[Path, Path, Path]:
    """(CA certificate, server certificate, server key): a CA, and a certificate it signed for
    127.0.0.1, valid for two days."""
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    openssl(
        "req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.pem", "-days", "2",
        "-subj", "/CN=Devicedeck test CA",
        "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign",
        cwd=directory,
    )  # fmt: skip
    openssl(
        "req", *ec, "-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=127.0.0.1",
        cwd=directory,
    )  # fmt: skip
    (directory / "server.ext").write_text(
        "subjectAltName=IP:127.0.0.1,DNS:localhost\n"
        "basicConstraints=critical,CA:FALSE\n"
        "keyUsage=critical,digitalSignature\n"
        "extendedKeyUsage=serverAuth\n"
    )
    openssl(
        "x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
        "-CAcreateserial", "-out", "server.pem", "-days", "2", "-extfile", "server.ext",
        cwd=directory,
    )  # fmt: skip
    return directory / "ca.pem", directory / "server.pem", directory / "server.key"


@pytest.fixture
def https_service(work_dir: Path) -> Iterator[tuple[Service, Path]]:
    ca, certificate, key = make_certificates(work_dir)
    service = Service(
        f"sqlite:///{work_dir / 'devicedeck.db'}",
        work_dir,
        serve_args=["--ssl-certfile", str(certificate), "--ssl-keyfile", str(key)],
        verify=ssl.create_default_context(cafile=str(ca)),
    )
    service.start()
    try:
        yield service, ca
    finally:
        service.stop()


def test_an_agent_that_trusts_the_services_ca_sends_over_https(
    https_service: tuple[Service, Path],
    sim_node: Callable[..., SimNode],
    start_agent: Callable[..., Process],
    node_name: str,
) -> None:
    service, ca = https_service
    assert service.url.startswith("https://")
    ingest = service.create_token("agent", "ingest")
    reader = service.create_token("reader", "read")
    node = sim_node([f"{GPU}:2"])
    # Without the CA the service's certificate is unknown: nothing gets through.
    distrusting = start_agent(service.url, ingest, node.root, "--interval", "2")
    start_agent(service.url, ingest, node.root, "--interval", "2", "--ca-file", str(ca))
    api = Api(service.url, reader, verify=service.verify)
    try:
        wait_until(lambda: counts(api, node_name) == (2, 0), message="the node's two GPUs")
    finally:
        api.close()
    wait_until(
        lambda: "CERTIFICATE_VERIFY_FAILED" in distrusting.output(),
        message="the agent without the CA to refuse the certificate",
    )


def test_serve_needs_both_certificate_and_key(work_dir: Path) -> None:
    service = Service(f"sqlite:///{work_dir / 'devicedeck.db'}", work_dir)
    done = subprocess.run(
        [DEVICEDECK, "serve", "--ssl-certfile", str(work_dir / "server.pem")],
        env=service.env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2
    assert "--ssl-certfile and --ssl-keyfile go together" in done.stderr


def test_ca_file_needs_an_https_server(work_dir: Path) -> None:
    done = subprocess.run(
        [
            DEVICEDECK, "agent", "--node", "node-a", "--server", "http://127.0.0.1:1",
            "--ca-file", str(work_dir / "ca.pem"),
        ],
        env=base_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )  # fmt: skip
    assert done.returncode == 2
    assert "--ca-file: only with an https:// --server" in done.stderr
