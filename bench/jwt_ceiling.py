"""The ceiling of GET /me: an endpoint that only verifies an HS256 JWT and answers its subject.

Same server settings as authgate (uvicorn, httptools, uvloop, access log on). Environment:
CEILING_SECRET (the HS256 key), tokens carry iss/aud "bench".
Serve with: uvicorn bench.jwt_ceiling:app --workers N
"""

from __future__ import annotations

import os

import jwt
from fastapi import FastAPI, Header, HTTPException  # noqa: TID251 - an app, not the service layer

SECRET = os.environ.get("CEILING_SECRET", "ceiling-secret-ceiling-secret-0123")

app = FastAPI()


@app.get("/me")
async def me(authorization: str = Header(default="")) -> dict[str, str]:
    scheme, _, token = authorization.partition(" ")
    if scheme.lower() != "bearer" or not token:
        raise HTTPException(401, "Not authenticated.")
    try:
        claims = jwt.decode(token, SECRET, algorithms=["HS256"], audience="bench", issuer="bench")
    except jwt.PyJWTError:
        raise HTTPException(401, "Not authenticated.") from None
    return {"sub": claims["sub"]}


@app.get("/health")
async def health() -> dict[str, str]:
    return {"status": "ok"}
