"""Optional asymmetric signing: EdDSA / ES256 access tokens, the JWKS, key rotation."""

from __future__ import annotations

import hmac
import json
import os
import stat
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

import jwt
import pytest
from cryptography.hazmat.primitives import serialization

from authgate import AuthConfig
from authgate.config import ConfigError
from authgate.tokens.jwks import GENERATED_KEY_FILE, load_signing_keys
from authgate.tokens.keys import Keys, TokenError
from tests.helpers import TEST_SECRET, b64, write_signing_key

NOW = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)
SID = "b" * 32


def _keys(
    tmp_path: Path,
    algorithm: Literal["HS256", "EdDSA", "ES256"],
    *,
    jwt_private_key_file: Path | None = None,
    jwt_previous_key_files: str = "",
) -> Keys:
    cfg = AuthConfig(
        data_dir=tmp_path,
        secret_key=TEST_SECRET,
        jwt_algorithm=algorithm,
        jwt_private_key_file=jwt_private_key_file,
        jwt_previous_key_files=jwt_previous_key_files,
    )
    return Keys(
        cfg.secret(), issuer="authgate", audience="authgate", signing=load_signing_keys(cfg)
    )


def test_embedded_setup_generates_one_key(tmp_path: Path) -> None:
    first = _keys(tmp_path, "EdDSA")
    path = tmp_path / GENERATED_KEY_FILE
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    second = _keys(tmp_path, "EdDSA")
    token = first.issue_access(user_id=1, session_id=SID, now=NOW, ttl=60)
    assert second.verify_access(token, now=NOW).user_id == 1


def test_hs256_has_an_empty_jwks(tmp_path: Path) -> None:
    assert _keys(tmp_path, "HS256").jwks() == {"keys": []}


def test_algorithm_confusion_and_key_ids_are_refused(tmp_path: Path) -> None:
    keys = _keys(tmp_path, "EdDSA")
    good = keys.issue_access(user_id=1, session_id=SID, now=NOW, ttl=60)
    header = jwt.get_unverified_header(good)
    payload = good.split(".")[1]
    public_pem = (tmp_path / GENERATED_KEY_FILE).read_bytes()  # stands in for a public key

    def forged(head: dict[str, object], key: bytes) -> str:
        signing_input = f"{b64(json.dumps(head).encode())}.{payload}"
        mac = hmac.new(key, signing_input.encode(), "sha256").digest()
        return f"{signing_input}.{b64(mac)}"

    # HS256 keyed with the public key: the classic confusion attack.
    for token in (
        forged({**header, "alg": "HS256"}, public_pem),
        forged({"alg": "HS256", "typ": "at+jwt"}, TEST_SECRET.encode()),
    ):
        with pytest.raises(TokenError):
            keys.verify_access(token, now=NOW)
    # A signature that is fine but a kid we never issued, or none at all.
    sig = good.rsplit(".", 1)[1]
    for bad_header in (
        {**header, "kid": "someone-else"},
        {k: v for k, v in header.items() if k != "kid"},
    ):
        token = f"{b64(json.dumps(bad_header).encode())}.{payload}.{sig}"
        with pytest.raises(TokenError):
            keys.verify_access(token, now=NOW)


def test_rotation_keeps_the_previous_key_verifying(tmp_path: Path) -> None:
    old_file = write_signing_key(tmp_path / "old.pem", "EdDSA")
    new_file = write_signing_key(tmp_path / "new.pem", "EdDSA")
    old = _keys(tmp_path, "EdDSA", jwt_private_key_file=old_file)
    token = old.issue_access(user_id=7, session_id=SID, now=NOW, ttl=60)
    rotated = _keys(
        tmp_path, "EdDSA", jwt_private_key_file=new_file, jwt_previous_key_files=str(old_file)
    )
    assert rotated.verify_access(token, now=NOW).user_id == 7
    assert len(rotated.jwks()["keys"]) == 2
    fresh = rotated.issue_access(user_id=7, session_id=SID, now=NOW, ttl=60)
    assert jwt.get_unverified_header(fresh)["kid"] == rotated.jwks()["keys"][0]["kid"]
    assert jwt.get_unverified_header(fresh)["kid"] != jwt.get_unverified_header(token)["kid"]
    # A previous key given as a public PEM works just as well.
    public_file = tmp_path / "old.pub"
    old_public = serialization.load_pem_private_key(old_file.read_bytes(), None).public_key()
    public_file.write_bytes(
        old_public.public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    by_public = _keys(
        tmp_path, "EdDSA", jwt_private_key_file=new_file, jwt_previous_key_files=str(public_file)
    )
    assert by_public.verify_access(token, now=NOW).user_id == 7
    # Once dropped, its tokens are refused.
    with pytest.raises(TokenError):
        _keys(tmp_path, "EdDSA", jwt_private_key_file=new_file).verify_access(token, now=NOW)


def test_misconfiguration_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="JWT_PRIVATE_KEY_FILE must be set"):
        load_signing_keys(
            AuthConfig(
                data_dir=tmp_path,
                secret_key=TEST_SECRET,
                database_url="postgresql://db.invalid/x",
                jwt_algorithm="EdDSA",
            )
        )
    ed_file = write_signing_key(tmp_path / "ed.pem", "EdDSA")
    with pytest.raises(ConfigError, match="P-256"):
        _keys(tmp_path, "ES256", jwt_private_key_file=ed_file)
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("-----BEGIN PRIVATE KEY-----\nbm90IGEga2V5\n-----END PRIVATE KEY-----\n")
    with pytest.raises(ConfigError) as info:
        _keys(tmp_path, "EdDSA", jwt_private_key_file=garbage)
    assert "bm90IGEga2V5" not in str(info.value)
