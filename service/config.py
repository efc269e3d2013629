"""Settings: GENSERVICE_* environment variables over an optional TOML file over defaults.

The TOML file (``genservice serve --config FILE``) uses the same keys in lower case
without the prefix; the environment wins (operations.md, "Install and start").
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr

PREFIX = "GENSERVICE_"


class Settings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    host: str = "127.0.0.1"
    port: int = 8000
    data_dir: Path = Path("./data")
    base_url: str | None = None
    operator_token: str | None = None
    # People (comma-separated emails) who reach the operator console through their own login
    operator_emails: str | None = None
    test_mode: bool = False
    webhook_ca_file: str | None = None
    webhook_allow_private: bool = False
    catalog_file: str | None = None
    # Top-ups: price and provider. Without Stripe keys the built-in test provider is used in
    # test mode; outside test mode POST /v1/billing/topups answers 503 billing.not_configured.
    usd_per_credit: str = "0.01"
    currency: str = "usd"
    stripe_secret_key: str | None = None
    stripe_webhook_secret: str | None = None
    stripe_api_base: str | None = None
    # Test mode only: make the n-th pass of a named crash point exit at once.
    crashpoint: str | None = None
    log_level: str = "INFO"
    # One OpenID Connect provider from the environment; more as [[oidc_providers]] tables
    # (name, issuer, client_id, client_secret) in the config file.
    oidc_name: str | None = None
    oidc_issuer: str | None = None
    oidc_client_id: str | None = None
    oidc_client_secret: str | None = None
    oidc_providers: list[dict] = []
    signup: Literal["open", "closed"] = "open"  # closed: invitations only
    # Mail (service/mail/): without an SMTP host every mail is written to the log instead
    smtp_host: str | None = None
    smtp_port: int = 587
    smtp_security: Literal["none", "starttls", "tls"] = "starttls"
    smtp_username: str | None = None
    smtp_password: SecretStr | None = None  # never shown in a log or repr
    smtp_ca_file: str | None = None  # extra PEM CA bundle trusted for the SMTP server's certificate
    mail_from: str | None = None  # default genservice@HOST
    # The key that seals stored secrets (service/sealing.py); keep it out of database backups.
    node_key_file: str | None = None
    # https served by Hypercorn itself (PEM files); without them, plain http (or a proxy's TLS)
    tls_cert: str | None = None
    tls_key: str | None = None
    # Proxies (addresses or networks, comma-separated) whose X-Forwarded-For is believed
    trusted_proxies: str | None = None
    # GET /metrics (Prometheus) answers only with this bearer token; unset: no metrics route
    metrics_token: str | None = None
    log_format: Literal["text", "json"] = "text"
    # Finished events, deliveries, job webhooks and sent mails are deleted after this many days
    retention_days: float = 30.0
    # Limits (service/limits.py); 0 turns one off
    rate_limit_per_key: float = 50.0
    rate_limit_burst: int = 200
    max_active_jobs_per_org: int = 100
    # Event streams open at once (service/streams/limits.py, docs/streams.md "Limits"); 0: no bound
    max_streams_per_key: int = 20
    max_streams_per_session: int = 10
    max_streams_per_org: int = 50
    # Password and mail forms (login, sign-up, reset, invitation acceptance) per client address:
    # this many at once, then one every 6 s (service/http/browser.py `throttle`). Raise it for a
    # node whose people all arrive from one address (a NAT without a trusted proxy).
    login_attempts_per_address: int = Field(default=20, ge=1)
    # Growing past one disk (operations.md): where asset bytes live (`file` or
    # s3://BUCKET/PREFIX), the S3-compatible endpoint and signing region, and the Litestream
    # replica of the database. Credentials come from AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY.
    asset_store: str = "file"
    s3_endpoint_url: str | None = None
    s3_region: str = "us-east-1"
    replica_url: str | None = None
    # The hook gate (service/hookgate/): HOST:PORT where a process of its own receives the
    # webhooks of the engine servers the operator runs (Cog), off the node's own port and
    # its thread; and the base URL those servers reach it at (default http://HOST:PORT).
    # Unset: they report to the node's own address, as hosted APIs always do.
    engine_hooks_listen: str | None = None
    engine_hooks_url: str | None = None

    @property
    def public_base_url(self) -> str:
        scheme = "https" if self.tls_cert else "http"
        return (self.base_url or f"{scheme}://{self.host}:{self.port}").rstrip("/")

    @property
    def db_path(self) -> Path:
        return self.data_dir / "genservice.db"

    @property
    def node_key_path(self) -> Path:
        return Path(self.node_key_file) if self.node_key_file else self.data_dir / "node-key"


def _coerce(value: str) -> str | bool:
    low = value.strip().lower()
    if low in {"1", "true", "yes", "on"}:
        return True
    if low in {"0", "false", "no", "off", ""}:
        return False
    return value


BOOL_FIELDS = {"test_mode", "webhook_allow_private"}


def load_settings(config_file: str | None = None, environ: dict[str, str] | None = None) -> Settings:
    env = os.environ if environ is None else environ
    values: dict = {}
    if config_file:
        with open(config_file, "rb") as f:
            values.update(tomllib.load(f))
    for name in Settings.model_fields:
        key = PREFIX + name.upper()
        if key in env:
            raw = env[key]
            values[name] = _coerce(raw) if name in BOOL_FIELDS else raw
    return Settings(**values)
