"""The TLS of the operator's progress endpoint, with no set-up: a CA and a serving certificate kept
in a Secret in the operator's namespace (every replica and restart of the operator serves the same),
and the CA published to each job namespace in a ConfigMap that the pods project (Trainer copies its
webhook CA into a ConfigMap per job for the same purpose: `plugins/trainjobstatus/trainjobstatus.go`
@8c0f505; one per namespace here, fewer writes).

Short-lived and renewed without a restart, as cert-manager and controller-runtime's certwatcher do:
the serving certificate is valid for CERT_VALID_DAYS and made again, by the same CA, once fewer than
RENEW_BEFORE_DAYS are left (`keep` looks every CHECK_S; the endpoint swaps its context in place, and
the pods, which trust the CA, see nothing change). The CA's key is kept in the Secret for that; the
CA itself (CA_VALID_DAYS) is made again once fewer than CA_RENEW_BEFORE_DAYS are left, and the pods
are given both CAs (`trusted_pem`) until the old one expires, so no pod's report is refused in
between.

The same Secret keeps the key that seals what the operator writes on pods restarting in place
(SEAL_KEY_KEY; kube/objects/front/inplace.py `Seal`): random, made once, never renewed (a renewal would
break the seals of the pods running), in no namespace but the operator's."""

from __future__ import annotations

import asyncio
import base64
import datetime as dt
import ipaddress
import logging
import secrets
import ssl
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from torchjob.kube.machinery.api_protocol import ApiProtocol
from torchjob.kube.machinery.client import status_code
from torchjob.kube.objects.workload.reporting import CA_KEY

log = logging.getLogger("torchjob.kube")
SECRET = "torchjob-progress-tls"
CERT_VALID_DAYS = 90
RENEW_BEFORE_DAYS = 30
CA_VALID_DAYS = 3650  # its key kept in the Secret: it signs every serving certificate of these years
CA_RENEW_BEFORE_DAYS = 180
CHECK_S = 3600.0
CA_KEY_KEY = "ca.key"  # the CA's private key, in the Secret (never in the namespaces' ConfigMaps)
TRUSTED_KEY = "trusted.crt"  # the CAs the pods are given: the current one, and the one before while it lasts
SEAL_KEY_KEY = "inplace-seal.key"  # the key of the seal of restarts in place (hex; never in a job namespace)


@dataclass(frozen=True)
class Tls:
    ca_pem: str
    cert_pem: str
    key_pem: str
    ca_key_pem: str = ""  # empty: a pair made before the key was kept (it cannot sign again)
    trusted_pem: str = ""  # the bundle pods trust (empty: ca_pem alone)
    seal_hex: str = ""  # the seal's key (empty: a pair made before it was kept)

    @property
    def seal_key(self) -> bytes:
        return bytes.fromhex(self.seal_hex) if self.seal_hex else b""

    @property
    def trusted(self) -> str:
        return self.trusted_pem or self.ca_pem

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


class Trust:
    """The CA bundle the pods are given, as it is now (the reconciler publishes it; `keep` renews it)."""

    def __init__(self, pem: str) -> None:
        self.pem = pem


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _pem_key(key: ec.EllipticCurvePrivateKey) -> str:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption()).decode()


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def _new_ca(now: dt.datetime) -> tuple[str, str]:
    start = now - dt.timedelta(minutes=5)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = _name("torchjob progress CA")
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name)
          .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
          .not_valid_before(start).not_valid_after(start + dt.timedelta(days=CA_VALID_DAYS))
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                       content_commitment=False, key_encipherment=False, data_encipherment=False,
                                       key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
          .sign(ca_key, hashes.SHA256()))
    return ca.public_bytes(serialization.Encoding.PEM).decode(), _pem_key(ca_key)


def generate(hosts: list[str], ca: tuple[str, str] | None = None, trusted: str = "",
             now: dt.datetime | None = None, seal_hex: str = "") -> Tls:
    """A serving certificate for `hosts` (DNS names or IP addresses) signed by `ca` (its certificate
    and key, PEM), or by a new CA when none is given; `trusted`: the bundle pods are given (default:
    the CA alone); `seal_hex`: the seal's key kept (default: a new one)."""
    now = now or _now()
    ca_pem, ca_key_pem = ca or _new_ca(now)
    ca_cert = x509.load_pem_x509_certificate(ca_pem.encode())
    ca_key = serialization.load_pem_private_key(ca_key_pem.encode(), password=None)
    assert isinstance(ca_key, ec.EllipticCurvePrivateKey)
    start = now - dt.timedelta(minutes=5)
    key = ec.generate_private_key(ec.SECP256R1())
    sans: list[x509.GeneralName] = []
    for h in hosts:
        try:
            sans.append(x509.IPAddress(ipaddress.ip_address(h)))
        except ValueError:
            sans.append(x509.DNSName(h))
    until = min(start + dt.timedelta(days=CERT_VALID_DAYS), ca_cert.not_valid_after_utc)
    cert = (x509.CertificateBuilder().subject_name(_name(hosts[0])).issuer_name(ca_cert.subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(start).not_valid_after(until)
            .add_extension(x509.SubjectAlternativeName(sans), critical=False)
            .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .sign(ca_key, hashes.SHA256()))
    pem = cert.public_bytes(serialization.Encoding.PEM).decode()
    return Tls(ca_pem, pem, _pem_key(key), ca_key_pem, trusted or ca_pem, seal_hex or secrets.token_hex(32))


def hosts_for(service: str, namespace: str) -> list[str]:
    return [f"{service}.{namespace}.svc", f"{service}.{namespace}.svc.cluster.local", service, "localhost",
            "127.0.0.1"]


def _secret_data(tls: Tls) -> dict[str, str]:
    return {k: base64.b64encode(v.encode()).decode() for k, v in
            ((CA_KEY, tls.ca_pem), ("tls.crt", tls.cert_pem), ("tls.key", tls.key_pem), (CA_KEY_KEY, tls.ca_key_pem),
             (TRUSTED_KEY, tls.trusted), (SEAL_KEY_KEY, tls.seal_hex))}


def _decode(secret: dict[str, Any]) -> Tls:
    data = {k: base64.b64decode(v).decode() for k, v in (secret.get("data") or {}).items()}
    return Tls(data[CA_KEY], data["tls.crt"], data["tls.key"], data.get(CA_KEY_KEY, ""), data.get(TRUSTED_KEY, ""),
               data.get(SEAL_KEY_KEY, ""))


def covers(cert_pem: str, hosts: list[str]) -> bool:
    """Whether the certificate names every host (DNS name or IP address) among its SANs."""
    san = x509.load_pem_x509_certificate(cert_pem.encode()).extensions.get_extension_for_class(
        x509.SubjectAlternativeName).value
    names = {*san.get_values_for_type(x509.DNSName), *(str(ip) for ip in san.get_values_for_type(x509.IPAddress))}
    return all(h in names for h in hosts)


def _left(pem: str, now: dt.datetime) -> dt.timedelta:
    return x509.load_pem_x509_certificate(pem.encode()).not_valid_after_utc - now


def _still_valid(bundle: str, now: dt.datetime) -> str:
    """The certificates of a PEM bundle that have not expired."""
    certs = x509.load_pem_x509_certificates(bundle.encode()) if bundle.strip() else []
    return "".join(c.public_bytes(serialization.Encoding.PEM).decode() for c in certs if c.not_valid_after_utc > now)


def renewed(stored: Tls, hosts: list[str], now: dt.datetime | None = None) -> Tls | None:
    """What replaces a stored pair, or None while it is good: a serving certificate that lacks a host
    or is near its end is made again by the same CA; a CA near its end (or whose key was not kept)
    is made anew, and the pods trust both until the old one expires. The seal's key is kept (made
    where there is none)."""
    now = now or _now()
    seal = stored.seal_hex
    ca_due = not stored.ca_key_pem or _left(stored.ca_pem, now) < dt.timedelta(days=CA_RENEW_BEFORE_DAYS)
    cert_due = not covers(stored.cert_pem, hosts) or _left(stored.cert_pem, now) < dt.timedelta(days=RENEW_BEFORE_DAYS)
    if ca_due:
        ca = _new_ca(now)
        return generate(hosts, ca, trusted=ca[0] + _still_valid(stored.trusted, now), now=now, seal_hex=seal)
    if cert_due:
        return generate(hosts, (stored.ca_pem, stored.ca_key_pem), trusted=_still_valid(stored.trusted, now), now=now,
                        seal_hex=seal)
    return None if seal else replace(stored, seal_hex=secrets.token_hex(32))


async def ensure(api: ApiProtocol, namespace: str, service: str, extra_hosts: tuple[str, ...] = (),
                 now: dt.datetime | None = None) -> Tls:
    """The Secret's CA and certificate, made and stored if there is none yet (two operators starting
    at once: the second's create gets 409 and it reads the first's), renewed when due (`renewed`).
    `extra_hosts`: what the pods are told beyond the Service's names (the host of --progress-url)."""
    own = hosts_for(service, namespace)
    hosts = [*own, *(h for h in extra_hosts if h not in own)]
    found = await api.find("Secret", SECRET, namespace)
    if found is not None:
        stored = _decode(found)
        tls = renewed(stored, hosts, now)
        if tls is None:
            return stored
        await api.patch_data("Secret", SECRET, namespace, _secret_data(tls))
        if tls.cert_pem == stored.cert_pem:  # only the seal's key was added (a Secret of an earlier version)
            log.info("kept a key for the seal of restarts in place in Secret %s/%s", namespace, SECRET)
            return tls
        log.info("made the progress endpoint's certificate again (valid until %s%s; Secret %s/%s)",
                 x509.load_pem_x509_certificate(tls.cert_pem.encode()).not_valid_after_utc.date(),
                 ", a new CA" if tls.ca_pem != stored.ca_pem else "", namespace, SECRET)
        return tls
    tls = generate(hosts, now=now)
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


async def keep(api: ApiProtocol, namespace: str, service: str, extra_hosts: tuple[str, ...], current: Tls,
               on_change: Callable[[Tls], None], every_s: float = CHECK_S) -> None:
    """Look every `every_s` whether the pair is due (or was renewed by another operator); hand a new
    one to `on_change` (the endpoint swaps its context, the namespaces get the new trust)."""
    while True:
        await asyncio.sleep(every_s)
        try:
            tls = await ensure(api, namespace, service, extra_hosts)
        except Exception as e:  # the API server away: the pair in use holds for weeks yet
            log.warning("the progress endpoint's certificate could not be checked: %s", e)
            continue
        if tls != current:
            current = tls
            on_change(tls)
