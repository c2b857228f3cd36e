"""Passkeys (WebAuthn Level 2, py_webauthn): the relying party authgate is to browsers."""

from __future__ import annotations

from urllib.parse import urlsplit

from authgate.config import AuthConfig

__all__ = ["rp_id", "rp_origins"]


def rp_id(config: AuthConfig) -> str:
    """The relying party id: `AUTHGATE_WEBAUTHN_RP_ID`, else the host of the public URL."""
    return config.webauthn_rp_id or (urlsplit(config.public_url).hostname or "localhost")


def rp_origins(config: AuthConfig) -> list[str]:
    """The origins a ceremony may come from: `AUTHGATE_WEBAUTHN_ORIGINS`, else the public
    URL's origin."""
    listed = [o.strip().rstrip("/") for o in config.webauthn_origins.split(",") if o.strip()]
    if listed:
        return listed
    parts = urlsplit(config.public_url)
    return [f"{parts.scheme}://{parts.netloc}"]
