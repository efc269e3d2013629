"""ID-token checks of the OpenID Connect client, against a provider served by an httpx mock
transport whose keys the test holds: signature, issuer, audience, expiry, nonce, key rotation."""

from __future__ import annotations

import httpx
import pytest
from joserfc import jwt
from joserfc.jwk import KeySet, RSAKey

from service.clock import Clock
from service.net.oidc import OidcError, OidcProvider, ProviderConfig, nonce_digest

ISS = "https://idp.example"
NOW = 1_790_000_000


def make_provider(keys: list[RSAKey]):
    state = {"keys": keys, "jwks_fetches": 0}

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/.well-known/openid-configuration":
            return httpx.Response(200, json={"issuer": ISS, "authorization_endpoint": ISS + "/auth",
                                             "token_endpoint": ISS + "/token", "jwks_uri": ISS + "/jwks"})
        if request.url.path == "/jwks":
            state["jwks_fetches"] += 1
            return httpx.Response(200, json=KeySet(state["keys"]).as_dict(private=False))
        return httpx.Response(404)

    client = httpx.AsyncClient(transport=httpx.MockTransport(handler))
    provider = OidcProvider(ProviderConfig("idp", "IdP", ISS, "client-1", None), Clock(start=NOW), client)
    return provider, state


def key(kid: str) -> RSAKey:
    return RSAKey.generate_key(2048, parameters={"kid": kid})


def token(k: RSAKey, **over) -> str:
    claims = {"iss": ISS, "aud": "client-1", "sub": "u1", "iat": NOW, "exp": NOW + 300, "nonce": "n-1"} | over
    claims = {c: v for c, v in claims.items() if v is not None}
    return jwt.encode({"alg": "RS256", "kid": k.kid}, claims, k)


async def test_good_token_and_each_refusal():
    good = key("k1")
    provider, _ = make_provider([good])
    claims = await provider.verify(token(good), nonce_digest("n-1"))
    assert claims["sub"] == "u1"
    refused = [
        token(key("k1")),                                   # signed by someone else's key, same kid
        token(good, iss="https://evil.example"),
        token(good, aud="other-client"),
        token(good, aud=["client-1", "other"]),             # several audiences, no azp
        token(good, exp=NOW - 61),                          # expired beyond the 60 s leeway
        token(good, iat=None),
        token(good, nonce="n-2"),
        token(good, nonce=None),
    ]
    for t in refused:
        with pytest.raises(OidcError, match="^The sign-in with IdP could not be verified. Start again.$"):
            await provider.verify(t, nonce_digest("n-1"))
    assert (await provider.verify(token(good, aud=["client-1", "x"], azp="client-1"), nonce_digest("n-1")))


async def test_unsigned_token_is_refused():
    good = key("k1")
    provider, _ = make_provider([good])
    import base64
    import json

    def b64(d):
        return base64.urlsafe_b64encode(json.dumps(d).encode()).rstrip(b"=").decode()

    unsigned = b64({"alg": "none"}) + "." + b64({"iss": ISS, "aud": "client-1", "sub": "u", "iat": NOW,
                                                  "exp": NOW + 60, "nonce": "n-1"}) + "."
    with pytest.raises(OidcError):
        await provider.verify(unsigned, nonce_digest("n-1"))


async def test_rotated_key_is_fetched_once_more():
    old, new = key("k1"), key("k2")
    provider, state = make_provider([old])
    await provider.verify(token(old), nonce_digest("n-1"))
    state["keys"] = [new]
    claims = await provider.verify(token(new), nonce_digest("n-1"))
    assert claims["sub"] == "u1" and state["jwks_fetches"] == 2
    with pytest.raises(OidcError):
        await provider.verify(token(key("k3")), nonce_digest("n-1"))
    assert state["jwks_fetches"] == 3
