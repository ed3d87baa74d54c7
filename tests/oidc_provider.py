"""A small but real OpenID Connect provider for the tests, run in its own process.

``python -m tests.oidc_provider`` serves, on a free port of 127.0.0.1 (printed as the
first line), what a provider publishes: discovery, an authorization endpoint with a
login form (a person's username), a token endpoint (authorization code with PKCE S256,
client secret in the body or HTTP Basic, each code good once and for 60 s), the signing
keys (RS256, JWKS) and user info. The test tells it who exists, with which groups, and
which faults to produce through ``POST /control`` (JSON):

    {"users": {"ada": {"groups": ["ml-team"], "email": "ada@example.com", "active": true}},
     "client_id": "portal", "client_secret": "…",
     "tamper": false,      # the ID token's payload changed after signing (a group added)
     "wrong_nonce": false, # the ID token carries another nonce than the one asked for
     "wrong_key": false}   # the ID token signed with a key the provider does not publish

``OidcProvider`` starts and stops it for a test and drives the login form with plain
HTTP, as a browser would submit it.
"""

import base64
import hashlib
import json
import secrets
import subprocess
import sys
import threading
import time
from html import escape
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import jwt
from cryptography.hazmat.primitives.asymmetric import rsa

CODE_SECONDS = 60


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


class State:
    """Everything the provider knows, behind one lock."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.other_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.kid = "test-key-1"
        self.config: dict[str, Any] = {
            "users": {},
            "client_id": "portal",
            "client_secret": "",
            "tamper": False,
            "wrong_nonce": False,
            "wrong_key": False,
        }
        self.codes: dict[str, dict[str, Any]] = {}
        self.access_tokens: dict[str, str] = {}
        self.used_codes: list[str] = []

    def jwks(self) -> dict[str, Any]:
        numbers = self.key.public_key().public_numbers()
        return {
            "keys": [
                {
                    "kty": "RSA",
                    "use": "sig",
                    "alg": "RS256",
                    "kid": self.kid,
                    "n": _b64(numbers.n.to_bytes((numbers.n.bit_length() + 7) // 8, "big")),
                    "e": _b64(numbers.e.to_bytes(3, "big")),
                }
            ]
        }


STATE = State()


class Handler(BaseHTTPRequestHandler):
    server_version = "TestOIDC/1"

    def log_message(self, *args: Any) -> None:  # quiet
        pass

    @property
    def issuer(self) -> str:
        return f"http://{self.server.server_address[0]}:{self.server.server_address[1]}"

    def _send(self, status: int, body: Any, content_type: str = "application/json") -> None:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(data)

    def _redirect(self, location: str) -> None:
        self.send_response(302)
        self.send_header("Location", location)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def _form(self) -> dict[str, str]:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length).decode()
        return {key: values[0] for key, values in parse_qs(raw).items()}

    def do_GET(self) -> None:
        url = urlsplit(self.path)
        query = {key: values[0] for key, values in parse_qs(url.query).items()}
        if url.path == "/.well-known/openid-configuration":
            self._send(200, self._discovery())
        elif url.path == "/jwks":
            self._send(200, STATE.jwks())
        elif url.path == "/authorize":
            self._login_form(query)
        elif url.path == "/userinfo":
            self._userinfo()
        else:
            self._send(404, {"error": "not_found"})

    def do_POST(self) -> None:
        url = urlsplit(self.path)
        if url.path == "/control":
            length = int(self.headers.get("Content-Length") or 0)
            with STATE.lock:
                STATE.config.update(json.loads(self.rfile.read(length) or b"{}"))
                used = list(STATE.used_codes)
            self._send(200, {"used_codes": used})
        elif url.path == "/authorize":
            self._authorize(self._form())
        elif url.path == "/token":
            self._token(self._form())
        else:
            self._send(404, {"error": "not_found"})

    def _discovery(self) -> dict[str, Any]:
        return {
            "issuer": self.issuer,
            "authorization_endpoint": f"{self.issuer}/authorize",
            "token_endpoint": f"{self.issuer}/token",
            "userinfo_endpoint": f"{self.issuer}/userinfo",
            "jwks_uri": f"{self.issuer}/jwks",
            "response_types_supported": ["code"],
            "subject_types_supported": ["public"],
            "id_token_signing_alg_values_supported": ["RS256"],
            "code_challenge_methods_supported": ["S256"],
            "token_endpoint_auth_methods_supported": ["client_secret_post", "client_secret_basic"],
        }

    def _login_form(self, query: dict[str, str]) -> None:
        if query.get("client_id") != STATE.config["client_id"]:
            self._send(400, b"unknown client", "text/plain")
            return
        hidden = "".join(
            f'<input type="hidden" name="{escape(name)}" value="{escape(value)}">'
            for name, value in query.items()
            if name != "username"
        )
        page = (
            "<!doctype html><title>Test IdP</title><form method=post action=/authorize>"
            f'{hidden}<label>User <input name="username" id="idp-username"></label>'
            '<button type="submit" id="idp-submit">Sign in</button></form>'
        )
        self._send(200, page.encode(), "text/html; charset=utf-8")

    def _authorize(self, form: dict[str, str]) -> None:
        redirect_uri, state = form.get("redirect_uri", ""), form.get("state", "")
        with STATE.lock:
            user = STATE.config["users"].get(form.get("username", ""))
            if form.get("client_id") != STATE.config["client_id"] or not redirect_uri:
                self._send(400, b"bad request", "text/plain")
                return
            if user is None or not user.get("active", True):
                self._redirect(
                    f"{redirect_uri}?{urlencode({'error': 'access_denied', 'state': state})}"
                )
                return
            code = secrets.token_urlsafe(24)
            STATE.codes[code] = {
                "username": form["username"],
                "nonce": form.get("nonce"),
                "redirect_uri": redirect_uri,
                "challenge": form.get("code_challenge"),
                "method": form.get("code_challenge_method"),
                "scope": form.get("scope", ""),
                "expires": time.time() + CODE_SECONDS,
            }
        self._redirect(f"{redirect_uri}?{urlencode({'code': code, 'state': state})}")

    def _client_ok(self, form: dict[str, str]) -> bool:
        client_id, secret = form.get("client_id"), form.get("client_secret")
        header = self.headers.get("Authorization", "")
        if header.startswith("Basic "):
            client_id, _, secret = base64.b64decode(header[6:]).decode().partition(":")
        return client_id == STATE.config["client_id"] and secret == STATE.config["client_secret"]

    def _token(self, form: dict[str, str]) -> None:
        with STATE.lock:
            if not self._client_ok(form):
                self._send(401, {"error": "invalid_client"})
                return
            code = form.get("code", "")
            grant = STATE.codes.pop(code, None)  # single use: gone once tried
            if grant is None or grant["expires"] < time.time():
                self._send(400, {"error": "invalid_grant"})
                return
            STATE.used_codes.append(code)
            verifier = form.get("code_verifier", "")
            if grant["challenge"]:
                made = _b64(hashlib.sha256(verifier.encode()).digest())
                if grant["method"] != "S256" or made != grant["challenge"]:
                    self._send(400, {"error": "invalid_grant"})
                    return
            if form.get("redirect_uri") != grant["redirect_uri"]:
                self._send(400, {"error": "invalid_grant"})
                return
            user = STATE.config["users"][grant["username"]]
            claims = _claims(grant["username"], user)
            now = int(time.time())
            id_claims = {
                **claims,
                "iss": self.issuer,
                "aud": STATE.config["client_id"],
                "iat": now,
                "exp": now + 300,
                "nonce": "not-the-nonce-you-sent"
                if STATE.config["wrong_nonce"]
                else grant["nonce"],
            }
            key = STATE.other_key if STATE.config["wrong_key"] else STATE.key
            id_token = jwt.encode(id_claims, key, algorithm="RS256", headers={"kid": STATE.kid})
            if STATE.config["tamper"]:
                head, _, signature = id_token.split(".")
                id_claims["groups"] = [*id_claims.get("groups", []), "portal-admins"]
                payload = _b64(json.dumps(id_claims).encode())
                id_token = f"{head}.{payload}.{signature}"
            access = secrets.token_urlsafe(24)
            STATE.access_tokens[access] = grant["username"]
        self._send(
            200,
            {
                "access_token": access,
                "token_type": "Bearer",
                "expires_in": 300,
                "id_token": id_token,
            },
        )

    def _userinfo(self) -> None:
        header = self.headers.get("Authorization", "")
        with STATE.lock:
            username = STATE.access_tokens.get(header.removeprefix("Bearer "))
            user = STATE.config["users"].get(username or "")
        if user is None:
            self._send(401, {"error": "invalid_token"})
            return
        self._send(200, _claims(username, user))


def _claims(username: str, user: dict[str, Any]) -> dict[str, Any]:
    return {
        "sub": user.get("sub", f"sub-{username}"),
        "preferred_username": username,
        "email": user.get("email", f"{username}@example.com"),
        "given_name": user.get("given_name", username.title()),
        "family_name": user.get("family_name", "Tester"),
        "groups": list(user.get("groups", [])),
    }


def serve() -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    sys.stdout.write(f"{server.server_address[1]}\n")
    sys.stdout.flush()
    server.serve_forever()


class OidcProvider:
    """The provider in a second process, for one test or module."""

    def __init__(self) -> None:
        root = Path(__file__).resolve().parents[1]
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.oidc_provider"],
            cwd=root,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.port = int(self.process.stdout.readline())
        self.issuer = f"http://127.0.0.1:{self.port}"

    def control(self, **changes: Any) -> dict[str, Any]:
        import requests

        answer = requests.post(f"{self.issuer}/control", json=changes, timeout=5)
        answer.raise_for_status()
        return answer.json()

    def log_in(self, authorize_url: str, username: str) -> str:
        """Submit the provider's login form for ``authorize_url`` as ``username``; the
        URL it sends the browser back to (the portal's callback, with code and state)."""
        import requests

        query = {key: values[0] for key, values in parse_qs(urlsplit(authorize_url).query).items()}
        answer = requests.post(
            f"{self.issuer}/authorize",
            data={**query, "username": username},
            allow_redirects=False,
            timeout=5,
        )
        assert answer.status_code == 302, answer.text
        return answer.headers["Location"]

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=10)


if __name__ == "__main__":
    serve()
