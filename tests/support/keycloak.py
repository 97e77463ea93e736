"""Keycloak, a real OpenID Connect provider, for the OAUTHBEARER tests.

The distribution comes from the Maven registry (``deploy/keycloak/pom.xml``, unpacked by
``make setup`` into ``~/.cache/kgw/keycloak-<version>``, or ``KGW_KEYCLOAK_HOME``) and runs on
Java 21 or newer (``KGW_KEYCLOAK_JAVA_HOME``, else the newest under /usr/lib/jvm).  One server
per test session, in development mode with an in-memory database, on free ports; the realm
``kgw`` (tests/support/keycloak/kgw-realm.json) is imported at start: confidential clients with
the client-credentials grant (``svc-orders`` in group ``payments``, ``svc-reports`` in
``analytics``, ``svc-other-audience`` whose tokens are not for kgw, ``kgw-upstream`` with 12 s
tokens, kgw's own login to an OAuth-only broker), an audience mapper that puts
``kgw`` in ``aud`` and a group-membership mapper for the ``groups`` claim.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from .ports import free_port
from .processes import ManagedProcess, ProcessError

REPO = Path(__file__).resolve().parents[2]
REALM_FILE = Path(__file__).resolve().parent / "keycloak" / "kgw-realm.json"
REALM = "kgw"
ADMIN = ("admin", "admin-secret")


def keycloak_version() -> str:
    pom = (REPO / "deploy" / "keycloak" / "pom.xml").read_text()
    found = re.search(r"<keycloak.version>(.+?)</keycloak.version>", pom)
    assert found, "deploy/keycloak/pom.xml names no keycloak.version"
    return found.group(1)


def keycloak_home() -> Path:
    version = keycloak_version()
    home = Path(os.environ.get("KGW_KEYCLOAK_HOME")
                or Path.home() / ".cache" / "kgw" / f"keycloak-{version}" / f"keycloak-{version}")
    if not (home / "bin" / "kc.sh").is_file():
        raise ProcessError(f"Keycloak {version} is not in {home}: run `make setup` (it resolves it with Maven)")
    return home


def java_home() -> Path:
    """A Java 21 or newer (Keycloak 26's minimum)."""
    given = os.environ.get("KGW_KEYCLOAK_JAVA_HOME")
    if given:
        return Path(given)
    candidates = []
    for path in Path("/usr/lib/jvm").glob("*"):
        found = re.search(r"(?:temurin|java|jdk)-(\d+)", path.name)
        if found and int(found.group(1)) >= 21 and (path / "bin" / "java").exists():
            candidates.append((int(found.group(1)), path))
    if not candidates:
        raise ProcessError("Keycloak needs Java 21 or newer: none under /usr/lib/jvm (set KGW_KEYCLOAK_JAVA_HOME)")
    return max(candidates)[1]


@dataclass
class Keycloak:
    process: ManagedProcess
    port: int

    @property
    def issuer(self) -> str:
        return f"http://127.0.0.1:{self.port}/realms/{REALM}"

    @property
    def token_endpoint(self) -> str:
        return f"{self.issuer}/protocol/openid-connect/token"

    def token(self, client_id: str, secret: str) -> str:
        """An access token for a confidential client (the client-credentials grant)."""
        body = urllib.parse.urlencode({"grant_type": "client_credentials", "client_id": client_id,
                                       "client_secret": secret}).encode()
        with urllib.request.urlopen(self.token_endpoint, body, timeout=30) as r:
            return json.loads(r.read())["access_token"]

    def _admin_token(self) -> str:
        body = urllib.parse.urlencode({"grant_type": "password", "client_id": "admin-cli", "username": ADMIN[0],
                                       "password": ADMIN[1]}).encode()
        url = f"http://127.0.0.1:{self.port}/realms/master/protocol/openid-connect/token"
        with urllib.request.urlopen(url, body, timeout=30) as r:
            return json.loads(r.read())["access_token"]

    def admin(self, method: str, path: str, payload: object | None = None) -> object:
        """A call of Keycloak's admin REST API on the realm (``path`` below /admin/realms/kgw)."""
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.port}/admin/realms/{REALM}{path}", method=method,
            data=None if payload is None else json.dumps(payload).encode(),
            headers={"Authorization": f"Bearer {self._admin_token()}", "Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=30) as r:
            body = r.read()
        return json.loads(body) if body else None

    def rotate_keys(self) -> str:
        """Add an RS256 key of a higher priority than any other: tokens are signed with it from
        now on.  Returns its key id."""
        realm_id = self.admin("GET", "")["id"]  # type: ignore[index]
        before = {k["kid"] for k in self.admin("GET", "/keys")["keys"]}  # type: ignore[index]
        self.admin("POST", "/components", {
            "name": f"rotated-{len(before)}", "providerId": "rsa-generated",
            "providerType": "org.keycloak.keys.KeyProvider", "parentId": realm_id,
            "config": {"priority": [str(1000 + len(before))], "algorithm": ["RS256"], "keySize": ["2048"]}})
        after = self.admin("GET", "/keys")["keys"]  # type: ignore[index]
        new = [k for k in after if k["kid"] not in before and k.get("algorithm") == "RS256"]
        assert new, after
        return new[0]["kid"]

    def stop(self) -> None:
        self.process.stop(timeout=30)


def launch_keycloak(work: Path) -> Keycloak:
    """Start Keycloak (development mode, in-memory, free ports) without waiting: it takes
    20-45 s, which the session spends on other tests (tests/conftest.py)."""
    home = keycloak_home()
    work.mkdir(parents=True, exist_ok=True)
    port, management = free_port(), free_port()
    env = {**os.environ, "JAVA_HOME": str(java_home()), "KC_BOOTSTRAP_ADMIN_USERNAME": ADMIN[0],
           "KC_BOOTSTRAP_ADMIN_PASSWORD": ADMIN[1],
           # the suite runs beside it on two cores: the quick JIT tier only
           "JAVA_OPTS_APPEND": "-XX:TieredStopAtLevel=1"}
    argv = [str(home / "bin" / "kc.sh"), "start-dev", f"--http-port={port}", "--http-host=127.0.0.1",
            f"--http-management-port={management}", "--db=dev-mem", "--cache=local"]
    return Keycloak(ManagedProcess("keycloak", argv, log_dir=work, env=env).start(), port)


def await_keycloak(keycloak: Keycloak) -> Keycloak:
    """Wait until it answers, then create the realm through its admin API."""
    try:
        keycloak.process.wait_for_line(r"Keycloak .* started in", 180)
        request = urllib.request.Request(
            f"http://127.0.0.1:{keycloak.port}/admin/realms", method="POST", data=REALM_FILE.read_bytes(),
            headers={"Authorization": f"Bearer {keycloak._admin_token()}", "Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=60):
            pass
    except BaseException:
        keycloak.stop()
        raise
    return keycloak


def start_keycloak(work: Path) -> Keycloak:
    return await_keycloak(launch_keycloak(work))
