"""Settings: GENSERVICE_* environment variables over an optional TOML file over defaults.

The TOML file (``genservice serve --config FILE``) uses the same keys in lower case
without the prefix; the environment wins (operations.md, "Install and start").

A value that does not parse stops the start with one line naming the variable (a traceback
or pydantic's report helps nobody at a shell); the value is shown unless the setting is a
secret (SECRETS) or unknown (a typo of a secret's name is still a secret).
"""

from __future__ import annotations

import difflib
import os
import tomllib
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, field_validator

PREFIX = "GENSERVICE_"
# Settings whose value is never shown in a refusal (nor anywhere else)
SECRETS = frozenset({"operator_token", "stripe_secret_key", "stripe_webhook_secret", "oidc_client_secret",
                     "oidc_providers", "smtp_password", "metrics_token"})
# GENSERVICE_* names read by the Python client, not by the node: not a typo when set
CLIENT_VARIABLES = frozenset({"GENSERVICE_API_KEY", "GENSERVICE_URL", "GENSERVICE_CONFIG"})
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
COUNT = 1_000_000  # the largest count a limit setting takes: a larger one is a typo


class SettingsError(ValueError):
    """A setting that cannot be used; the message says which and why, in one line."""


class Settings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    host: str = "127.0.0.1"
    port: int = Field(default=8000, ge=0, le=65535)  # 0: any free port (tests)
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
    smtp_port: int = Field(default=587, ge=1, le=65535)
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
    retention_days: float = Field(default=30.0, gt=0, le=36500, allow_inf_nan=False)
    # Limits (service/limits.py); 0 turns one off
    rate_limit_per_key: float = Field(default=50.0, ge=0, le=COUNT, allow_inf_nan=False)
    rate_limit_burst: int = Field(default=200, ge=0, le=COUNT)
    max_active_jobs_per_org: int = Field(default=100, ge=0, le=COUNT)
    # Event streams open at once (service/streams/limits.py, docs/streams.md "Limits"); 0: no bound
    max_streams_per_key: int = Field(default=20, ge=0, le=COUNT)
    max_streams_per_session: int = Field(default=10, ge=0, le=COUNT)
    max_streams_per_org: int = Field(default=50, ge=0, le=COUNT)
    # Password and mail forms (login, sign-up, reset, invitation acceptance) per client address:
    # this many at once, then one every 6 s (service/http/browser.py `throttle`). Raise it for a
    # node whose people all arrive from one address (a NAT without a trusted proxy).
    login_attempts_per_address: int = Field(default=20, ge=1, le=COUNT)
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

    @field_validator("log_level")
    @classmethod
    def _log_level(cls, value: str) -> str:
        if value.upper() not in LOG_LEVELS:
            raise ValueError("must be one of " + ", ".join(LOG_LEVELS))
        return value.upper()

    @field_validator("replica_url")
    @classmethod
    def _replica_url(cls, value: str | None) -> str | None:
        if value is not None:
            parts = urlsplit(value)
            if parts.scheme != "s3" or not parts.netloc or not parts.path.strip("/"):
                raise ValueError("must be s3://BUCKET/PATH")
        return value

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


TRUE, FALSE = {"1", "true", "yes", "on"}, {"0", "false", "no", "off", ""}
BOOL_FIELDS = {"test_mode", "webhook_allow_private"}


def _coerce(key: str, value: str) -> bool:
    low = value.strip().lower()
    if low in TRUE or low in FALSE:
        return low in TRUE
    raise SettingsError(f"{key}: must be 1 or 0 (true/false, yes/no, on/off), not {value!r}")


def _where(name: str, from_env: set[str], config_file: str | None) -> str:
    return PREFIX + name.upper() if name in from_env or not config_file else f"{name} in {config_file}"


def _refusal(error: ValidationError, values: dict, from_env: set[str], config_file: str | None) -> SettingsError:
    """pydantic's report as one line: where, what is wanted and (not for a secret) what was given."""
    lines = []
    for err in error.errors():
        name = str(err["loc"][0]) if err["loc"] else "?"
        where = _where(name, from_env, config_file)
        if err["type"] == "extra_forbidden":
            close = difflib.get_close_matches(name, Settings.model_fields, n=1)
            lines.append(f"{where}: not a setting" + (f" (did you mean {close[0]}?)" if close else ""))
            continue
        msg = err["msg"].removeprefix("Value error, ")
        msg = msg[0].lower() + msg[1:] if msg else "not valid"
        shown = "" if name in SECRETS else f", not {values.get(name)!r}"
        lines.append(f"{where}: {msg}{shown}")
    return SettingsError("; ".join(lines))


def load_settings(config_file: str | None = None, environ: dict[str, str] | None = None) -> Settings:
    env = os.environ if environ is None else environ
    values: dict = {}
    if config_file:
        try:
            with open(config_file, "rb") as f:
                values.update(tomllib.load(f))
        except (OSError, tomllib.TOMLDecodeError) as e:
            reason = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
            raise SettingsError(f"cannot read the config file {config_file}: {' '.join(str(reason).split())}") from None
    from_env: set[str] = set()
    for name in Settings.model_fields:
        key = PREFIX + name.upper()
        if key in env:
            raw = env[key]
            values[name] = _coerce(key, raw) if name in BOOL_FIELDS else raw
            from_env.add(name)
    try:
        return Settings(**values)
    except ValidationError as e:
        raise _refusal(e, values, from_env, config_file) from None


def unknown_variables(environ: dict[str, str] | None = None) -> list[str]:
    """GENSERVICE_* names that are no setting (a typo leaves its default silently in force)."""
    env = os.environ if environ is None else environ
    known = {PREFIX + name.upper() for name in Settings.model_fields} | CLIENT_VARIABLES
    found = []
    for key in sorted(k for k in env if k.startswith(PREFIX) and k not in known):
        close = difflib.get_close_matches(key, known - CLIENT_VARIABLES, n=1)
        found.append(f"{key} is not a setting" + (f" (did you mean {close[0]}?)" if close else ""))
    return found
