"""The browser client (contract §7): `{prefix}/client.js`, a dependency-free ES module, and
`{prefix}/client.d.ts` beside it, served from `web/static/`.

Both are read once, when the router is built (the module's default prefix becomes the
configured one, so `createClient()` needs no options on authgate's own origin), and served with
a strong ETag (a hash of what is served: `If-None-Match` gets 304) and a five-minute `max-age`,
so that a new release reaches browsers within minutes without a fetch per page view. GET and
HEAD. (`X-Content-Type-Options: nosniff` comes with every answer, from `RequestGuard`.)"""

from __future__ import annotations

import hashlib
import json
from importlib.resources import files
from typing import TYPE_CHECKING

from fastapi import APIRouter, Request, Response

if TYPE_CHECKING:
    from authgate.app import AuthGate

__all__ = ["client_router"]

#: file name under web/static/ -> its Content-Type.
ASSETS = {
    "client.js": "text/javascript; charset=utf-8",
    "client.d.ts": "application/typescript; charset=utf-8",
}
CACHE_CONTROL = "public, max-age=300"


#: The line of client.js that names the default prefix.
DEFAULT_PREFIX_LINE = 'const DEFAULT_PREFIX = "/auth";'


class _Asset:
    def __init__(self, name: str, media_type: str, prefix: str) -> None:
        text = files("authgate.web").joinpath("static", name).read_text("utf-8")
        if name == "client.js":
            if DEFAULT_PREFIX_LINE not in text:
                raise RuntimeError("web/static/client.js lacks its DEFAULT_PREFIX line")
            text = text.replace(
                DEFAULT_PREFIX_LINE, f"const DEFAULT_PREFIX = {json.dumps(prefix)};", 1
            )
        self.body = text.encode("utf-8")
        self.etag = f'"{hashlib.sha256(self.body).hexdigest()[:32]}"'
        self.headers = {
            "Content-Type": media_type,
            "ETag": self.etag,
            "Cache-Control": CACHE_CONTROL,
        }
        self.not_modified = {k: v for k, v in self.headers.items() if k != "Content-Type"}

    def response(self, request: Request) -> Response:
        if self._matches(request.headers.get("if-none-match")):
            return Response(status_code=304, headers=self.not_modified)
        if request.method == "HEAD":
            return Response(headers={**self.headers, "Content-Length": str(len(self.body))})
        return Response(self.body, headers=self.headers)

    def _matches(self, header: str | None) -> bool:
        if not header:
            return False
        tags = {tag.strip().removeprefix("W/") for tag in header.split(",")}
        return "*" in tags or self.etag in tags


def client_router(gate: AuthGate) -> APIRouter:
    router = APIRouter(prefix=gate.config.prefix, include_in_schema=False)
    for name, media_type in ASSETS.items():
        router.add_api_route(
            f"/{name}",
            _Asset(name, media_type, gate.config.prefix).response,
            methods=["GET", "HEAD"],
        )
    return router
