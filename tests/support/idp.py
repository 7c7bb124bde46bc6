"""A loopback identity provider for tests: discovery document and JWKS over HTTP, keys it can rotate,
and tokens it signs (RS256 / ES256 with cryptography keys, through PyJWT)."""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import jwt
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.hazmat.primitives.asymmetric.types import PrivateKeyTypes

AUDIENCE = "gamma-api"


@dataclass
class SigningKey:
    kid: str
    alg: str
    private: PrivateKeyTypes

    @classmethod
    def rsa(cls, kid: str) -> SigningKey:
        return cls(kid, "RS256", rsa.generate_private_key(public_exponent=65537, key_size=2048))

    @classmethod
    def ec(cls, kid: str) -> SigningKey:
        return cls(kid, "ES256", ec.generate_private_key(ec.SECP256R1()))

    def public_jwk(self) -> dict[str, Any]:
        algorithm = jwt.get_algorithm_by_name(self.alg)
        jwk: dict[str, Any] = json.loads(algorithm.to_jwk(self.private.public_key()))
        return {**jwk, "kid": self.kid, "alg": self.alg, "use": "sig"}


@dataclass
class Idp:
    """Serves /.well-known/openid-configuration and /jwks; `published` is what the JWKS lists now."""

    published: list[SigningKey] = field(default_factory=list)
    down: bool = False
    jwks_requests: int = 0
    # Hanging: a JWKS request is counted, then held open with no answer until `release` is set (or stop()).
    hanging: bool = False
    release: threading.Event = field(default_factory=threading.Event)
    _server: ThreadingHTTPServer | None = None

    @property
    def issuer(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> Idp:
        idp = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's naming
                if idp.down:
                    self._send(503, {"error": "down"})
                elif self.path == "/.well-known/openid-configuration":
                    self._send(200, {"issuer": idp.issuer, "jwks_uri": idp.issuer + "/jwks"})
                elif self.path == "/jwks":
                    idp.jwks_requests += 1
                    if idp.hanging:
                        idp.release.wait(60)
                    self._send(200, {"keys": [key.public_jwk() for key in idp.published]})
                else:
                    self._send(404, {})

            def _send(self, status: int, body: dict[str, Any]) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: object) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True).start()
        return self

    def stop(self) -> None:
        self.release.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    def claims(self, sub: str, **overrides: Any) -> dict[str, Any]:
        now = int(time.time())
        return {"iss": self.issuer, "aud": AUDIENCE, "sub": sub, "iat": now, "nbf": now, "exp": now + 300,
                **overrides}

    def token(self, key: SigningKey, sub: str = "alice@idp", **overrides: Any) -> str:
        return jwt.encode(self.claims(sub, **overrides), key.private, algorithm=key.alg,  # type: ignore[arg-type]
                          headers={"kid": key.kid})
