"""/docs: Swagger UI from the CDN at one exact version, each file checked by the browser
against its SRI digest (computed from the npm package swagger-ui-dist, which the CDN serves as
it is), under a CSP that allows these two files, the inline start-up script by its digest, and
requests to this origin only. The page shares its origin with the auth cookies: nothing else
may run there. To move to another version, take the digests from its npm tarball:

    openssl dgst -sha384 -binary package/swagger-ui-bundle.js | base64
"""

from __future__ import annotations

import base64
import hashlib
import json

from fastapi import FastAPI
from fastapi.responses import HTMLResponse

__all__ = ["SWAGGER_UI_CSS", "SWAGGER_UI_JS", "SWAGGER_UI_VERSION", "add_docs"]

SWAGGER_UI_VERSION = "5.35.0"
_SWAGGER_BASE = f"https://cdn.jsdelivr.net/npm/swagger-ui-dist@{SWAGGER_UI_VERSION}"
SWAGGER_UI_JS = (
    f"{_SWAGGER_BASE}/swagger-ui-bundle.js",
    "sha384-gjRm0bEPMeTmMh5jT2cHccIwCUZSTd8YC+j0d0sXw0MdGEfScduGpSyF3ZSSLkX9",
)
SWAGGER_UI_CSS = (
    f"{_SWAGGER_BASE}/swagger-ui.css",
    "sha384-WlYgdmXYOOBWL5apwjDEZwN+U3HmXSSu5R6V5aGxEcf7z+KuRNwBhoxKVN1i3D5I",
)


def add_docs(app: FastAPI) -> None:
    """Serve the page at /docs, for `app`'s OpenAPI document."""
    openapi_url = json.dumps(app.openapi_url or "/openapi.json")
    start = (
        f"SwaggerUIBundle({{url: {openapi_url}, dom_id: '#swagger-ui', layout: 'BaseLayout', "
        "deepLinking: true, validatorUrl: null, queryConfigEnabled: false, "
        "presets: [SwaggerUIBundle.presets.apis]});"
    )
    start_digest = base64.b64encode(hashlib.sha256(start.encode()).digest()).decode()
    (js, js_sri), (css, css_sri) = SWAGGER_UI_JS, SWAGGER_UI_CSS
    page = (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        "<title>authgate: API documentation</title>\n"
        '<link rel="icon" href="data:,">\n'
        f'<link rel="stylesheet" href="{css}" integrity="{css_sri}" crossorigin="anonymous">\n'
        '</head>\n<body>\n<div id="swagger-ui"></div>\n'
        f'<script src="{js}" integrity="{js_sri}" crossorigin="anonymous"></script>\n'
        f"<script>{start}</script>\n</body>\n</html>\n"
    )
    headers = {
        "Content-Security-Policy": (
            f"default-src 'none'; script-src {js} 'sha256-{start_digest}'; "
            # Swagger UI sets style attributes on the elements it renders.
            f"style-src {css} 'unsafe-inline'; img-src 'self' data:; connect-src 'self'; "
            "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
        ),
        "Referrer-Policy": "no-referrer",
        "X-Frame-Options": "DENY",
    }

    @app.get("/docs", include_in_schema=False)
    async def docs() -> HTMLResponse:
        return HTMLResponse(page, headers=headers)
