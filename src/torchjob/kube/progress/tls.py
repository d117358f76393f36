"""The TLS of the operator's progress endpoint, with no set-up: a CA and a serving certificate made
once and kept in a Secret in the operator's namespace (every replica and restart of the operator
serves the same), and the CA published to each job namespace in a ConfigMap that the pods project
(Trainer copies its webhook CA into a ConfigMap per job for the same purpose:
`plugins/trainjobstatus/trainjobstatus.go` @8c0f505; one per namespace here, fewer writes)."""

from __future__ import annotations

import base64
import datetime as dt
import ipaddress
import logging
import ssl
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from torchjob.kube.machinery.client import Api, status_code
from torchjob.kube.objects.pods import CA_KEY

log = logging.getLogger("torchjob.kube")
SECRET = "torchjob-progress-tls"
VALID_DAYS = 3650


@dataclass(frozen=True)
class Tls:
    ca_pem: str
    cert_pem: str
    key_pem: str

    def context(self) -> ssl.SSLContext:
        """A server context (the standard library loads a chain from files only: a private temp dir)."""
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        with tempfile.TemporaryDirectory(prefix="torchjob-tls-") as d:
            cert, key = Path(d) / "tls.crt", Path(d) / "tls.key"
            cert.write_text(self.cert_pem + self.ca_pem)
            key.touch(0o600)
            key.write_text(self.key_pem)
            ctx.load_cert_chain(cert, key)
        return ctx


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _pem_key(key: ec.EllipticCurvePrivateKey) -> str:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption()).decode()


def generate(hosts: list[str]) -> Tls:
    """A CA and a certificate for `hosts` (DNS names or IP addresses) signed by it."""
    now = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=5)
    until = now + dt.timedelta(days=VALID_DAYS)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = _name("torchjob progress CA")
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name)
          .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
          .not_valid_before(now).not_valid_after(until)
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                       content_commitment=False, key_encipherment=False, data_encipherment=False,
                                       key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
          .sign(ca_key, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP256R1())
    sans: list[x509.GeneralName] = []
    for h in hosts:
        try:
            sans.append(x509.IPAddress(ipaddress.ip_address(h)))
        except ValueError:
            sans.append(x509.DNSName(h))
    cert = (x509.CertificateBuilder().subject_name(_name(hosts[0])).issuer_name(ca.subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now).not_valid_after(until)
            .add_extension(x509.SubjectAlternativeName(sans), critical=False)
            .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .sign(ca_key, hashes.SHA256()))
    pem = serialization.Encoding.PEM
    return Tls(ca.public_bytes(pem).decode(), cert.public_bytes(pem).decode(), _pem_key(key))


def hosts_for(service: str, namespace: str) -> list[str]:
    return [f"{service}.{namespace}.svc", f"{service}.{namespace}.svc.cluster.local", service, "localhost",
            "127.0.0.1"]


def _secret_data(tls: Tls) -> dict[str, str]:
    return {k: base64.b64encode(v.encode()).decode() for k, v in
            ((CA_KEY, tls.ca_pem), ("tls.crt", tls.cert_pem), ("tls.key", tls.key_pem))}


def _decode(secret: dict[str, Any]) -> Tls:
    data = {k: base64.b64decode(v).decode() for k, v in (secret.get("data") or {}).items()}
    return Tls(data[CA_KEY], data["tls.crt"], data["tls.key"])


def covers(cert_pem: str, hosts: list[str]) -> bool:
    """Whether the certificate names every host (DNS name or IP address) among its SANs."""
    san = x509.load_pem_x509_certificate(cert_pem.encode()).extensions.get_extension_for_class(
        x509.SubjectAlternativeName).value
    names = {*san.get_values_for_type(x509.DNSName), *(str(ip) for ip in san.get_values_for_type(x509.IPAddress))}
    return all(h in names for h in hosts)


async def ensure(api: Api, namespace: str, service: str, extra_hosts: tuple[str, ...] = ()) -> Tls:
    """The Secret's CA and certificate, made and stored if there is none yet (two operators starting
    at once: the second's create gets 409 and it reads the first's). `extra_hosts`: what the pods are
    told beyond the Service's names (the host of --progress-url); a stored certificate that does not
    name them all is made again, and the job namespaces' CA ConfigMaps follow (the reconciler)."""
    own = hosts_for(service, namespace)
    hosts = [*own, *(h for h in extra_hosts if h not in own)]
    found = await api.find("Secret", SECRET, namespace)
    if found is not None:
        stored = _decode(found)
        if covers(stored.cert_pem, hosts):
            return stored
        tls = generate(hosts)
        await api.patch_data("Secret", SECRET, namespace, _secret_data(tls))
        log.info("made the progress endpoint's certificate again, for %s (Secret %s/%s)", ", ".join(extra_hosts),
                 namespace, SECRET)
        return tls
    tls = generate(hosts)
    body = {"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
            "metadata": {"name": SECRET, "namespace": namespace, "labels": {"app.kubernetes.io/name": service}},
            "data": _secret_data(tls)}
    try:
        await api.create(body)
        log.info("made the progress endpoint's CA and certificate (Secret %s/%s)", namespace, SECRET)
        return tls
    except Exception as e:
        if status_code(e) == 404:  # no such namespace (an operator run by hand): this run's own pair
            log.warning("namespace %s does not exist: the progress endpoint's CA lasts only as long as this "
                        "operator process (create the namespace, or pass --lease-namespace, to keep it)", namespace)
            return tls
        if status_code(e) != 409:
            raise
        return _decode(await api.get("Secret", SECRET, namespace))
