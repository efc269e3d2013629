"""OpenID Connect relying party: discovery, authorization code flow with PKCE, ID-token checks.

One `OidcProvider` per configured provider. The issuer's discovery document is fetched
(httpx) on first use and its `issuer` must equal the configured one. The ID token from the
token endpoint is checked with joserfc against the provider's JWKS (fetched again once when
the token names a key id it does not hold): signature (asymmetric algorithms only), `iss`,
`aud` (and `azp` when there are several audiences), `exp`/`iat` on the service clock (60 s
leeway), and `nonce` against the digest kept for the flow. Every failure is `OidcError`
with a message fit for the person; details go to the log only.

The PKCE verifier is derived from the flow's `state` with the node's secret (`pkce_verifier`),
so it is never stored.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import logging
from dataclasses import dataclass
from urllib.parse import urlencode

import httpx
from joserfc import jwt
from joserfc.errors import InvalidKeyIdError, JoseError
from joserfc.jwk import KeySet

from service.clock import Clock

log = logging.getLogger(__name__)

ALGORITHMS = ["RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"]
LEEWAY = 60
TIMEOUT = 10.0


class OidcError(Exception):
    """A sign-in with the provider that cannot finish; the message is shown to the person."""


@dataclass(frozen=True)
class ProviderConfig:
    key: str            # URL-safe name used in the callback path
    name: str           # shown on the login page: "Sign in with NAME"
    issuer: str
    client_id: str
    client_secret: str | None


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def pkce_verifier(secret: bytes, state: str) -> str:
    return _b64(hmac.new(secret, b"pkce:" + state.encode(), hashlib.sha256).digest())


def pkce_challenge(verifier: str) -> str:
    return _b64(hashlib.sha256(verifier.encode()).digest())


def nonce_digest(nonce: str) -> str:
    return hashlib.sha256(nonce.encode()).hexdigest()


class OidcProvider:
    def __init__(self, config: ProviderConfig, clock: Clock, client: httpx.AsyncClient) -> None:
        self.config = config
        self.clock = clock
        self.client = client
        self._meta: dict | None = None
        self._keys: KeySet | None = None

    @property
    def name(self) -> str:
        return self.config.name

    async def _get_json(self, url: str) -> dict:
        try:
            r = await self.client.get(url, timeout=TIMEOUT)
            r.raise_for_status()
            data = r.json()
        except (httpx.HTTPError, ValueError) as e:
            log.warning("oidc %s: GET %s failed: %r", self.config.key, url, e)
            raise OidcError(f"{self.name} could not be reached. Try again in a moment.") from None
        if not isinstance(data, dict):
            raise OidcError(f"{self.name} sent an answer we cannot read.")
        return data

    async def metadata(self) -> dict:
        if self._meta is None:
            url = self.config.issuer.rstrip("/") + "/.well-known/openid-configuration"
            meta = await self._get_json(url)
            if meta.get("issuer") != self.config.issuer:
                log.warning("oidc %s: discovery issuer %r != configured %r", self.config.key,
                            meta.get("issuer"), self.config.issuer)
                raise OidcError(f"{self.name} is not configured correctly (issuer mismatch).")
            for field in ("authorization_endpoint", "token_endpoint", "jwks_uri"):
                if not isinstance(meta.get(field), str):
                    raise OidcError(f"{self.name} is not configured correctly (no {field}).")
            self._meta = meta
        return self._meta

    async def authorization_url(self, redirect_uri: str, state: str, nonce: str, verifier: str) -> str:
        meta = await self.metadata()
        query = urlencode({"response_type": "code", "client_id": self.config.client_id,
                           "redirect_uri": redirect_uri, "scope": "openid email profile", "state": state,
                           "nonce": nonce, "code_challenge": pkce_challenge(verifier),
                           "code_challenge_method": "S256"})
        endpoint = meta["authorization_endpoint"]
        return endpoint + ("&" if "?" in endpoint else "?") + query

    async def exchange(self, code: str, verifier: str, redirect_uri: str, nonce_hash: str) -> dict:
        """Trade the code for tokens; return the checked ID token's claims."""
        meta = await self.metadata()
        form = {"grant_type": "authorization_code", "code": code, "redirect_uri": redirect_uri,
                "code_verifier": verifier, "client_id": self.config.client_id}
        auth = httpx.BasicAuth(self.config.client_id, self.config.client_secret) if self.config.client_secret \
            else httpx.USE_CLIENT_DEFAULT
        try:
            r = await self.client.post(meta["token_endpoint"], data=form, auth=auth, timeout=TIMEOUT)
        except httpx.HTTPError as e:
            log.warning("oidc %s: token request failed: %r", self.config.key, e)
            raise OidcError(f"{self.name} could not be reached. Try again in a moment.") from None
        if r.status_code != 200:
            log.warning("oidc %s: token endpoint answered %s: %.300s", self.config.key, r.status_code, r.text)
            raise OidcError(f"{self.name} did not accept the sign-in. Start again.")
        try:
            id_token = r.json()["id_token"]
        except (ValueError, KeyError, TypeError):
            raise OidcError(f"{self.name} sent no ID token.") from None
        return await self.verify(id_token, nonce_hash)

    async def _keyset(self, refresh: bool = False) -> KeySet:
        if self._keys is None or refresh:
            data = await self._get_json((await self.metadata())["jwks_uri"])
            try:
                self._keys = KeySet.import_key_set(data)  # type: ignore[arg-type]
            except (JoseError, ValueError, KeyError, TypeError):
                raise OidcError(f"{self.name} published keys we cannot read.") from None
        return self._keys

    async def verify(self, id_token: str, nonce_hash: str) -> dict:
        token = None
        for refresh in (False, True):  # a key id we do not hold: the provider rotated, fetch again
            keys = await self._keyset(refresh)
            try:
                token = jwt.decode(id_token, keys, algorithms=ALGORITHMS)
                break
            except (JoseError, ValueError) as e:
                if refresh or not isinstance(e, InvalidKeyIdError):
                    log.warning("oidc %s: ID token refused: %r", self.config.key, e)
                    raise OidcError(f"The sign-in with {self.name} could not be verified. Start again.") from None
        assert token is not None  # the loop returned a token or raised
        claims = token.claims
        registry = jwt.JWTClaimsRegistry(
            now=lambda: int(self.clock.now()), leeway=LEEWAY,
            iss={"essential": True, "value": self.config.issuer},
            sub={"essential": True}, exp={"essential": True}, iat={"essential": True})
        try:
            registry.validate(claims)
        except JoseError as e:
            log.warning("oidc %s: ID token claims refused: %r", self.config.key, e)
            raise OidcError(f"The sign-in with {self.name} could not be verified. Start again.") from None
        aud = claims.get("aud")
        audiences = [aud] if isinstance(aud, str) else aud if isinstance(aud, list) else []
        if self.config.client_id not in audiences or (len(audiences) > 1
                                                      and claims.get("azp") != self.config.client_id):
            log.warning("oidc %s: ID token audience %r refused", self.config.key, aud)
            raise OidcError(f"The sign-in with {self.name} could not be verified. Start again.")
        nonce = claims.get("nonce")
        if not isinstance(nonce, str) or not hmac.compare_digest(nonce_digest(nonce), nonce_hash):
            log.warning("oidc %s: ID token nonce does not match the flow", self.config.key)
            raise OidcError(f"The sign-in with {self.name} could not be verified. Start again.")
        return claims


def configured(settings) -> list[ProviderConfig]:
    """The provider from GENSERVICE_OIDC_* first, then the config file's [[oidc_providers]]."""
    entries = []
    if settings.oidc_issuer or settings.oidc_client_id or settings.oidc_name:
        entries.append({"name": settings.oidc_name, "issuer": settings.oidc_issuer,
                        "client_id": settings.oidc_client_id, "client_secret": settings.oidc_client_secret})
    entries.extend(settings.oidc_providers)
    out: list[ProviderConfig] = []
    for e in entries:
        missing = [f for f in ("name", "issuer", "client_id") if not e.get(f)]
        if missing:
            raise ValueError(f"OpenID Connect provider {e.get('name')!r}: missing {', '.join(missing)}")
        unknown = set(e) - {"name", "issuer", "client_id", "client_secret"}
        if unknown:
            raise ValueError(f"OpenID Connect provider {e['name']!r}: unknown keys {', '.join(sorted(unknown))}")
        key = "".join(c if c.isalnum() else "-" for c in e["name"].lower()).strip("-") or "provider"
        if any(p.key == key for p in out):
            raise ValueError(f"OpenID Connect provider {e['name']!r} is configured twice")
        out.append(ProviderConfig(key, e["name"], e["issuer"], e["client_id"], e.get("client_secret")))
    return out
