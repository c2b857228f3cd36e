"""One router for all of authgate's routes, which answers "not mine" in one step.

FastAPI (0.12x and later) keeps an included router as one entry of the application's routes
and, for every request, tries each of its routes in turn until one matches. In an application
that mounts authgate (`AuthGate.install`), every request to one of the host's own routes
declared after `install()` was therefore tried against all of authgate's ~100 routes first:
measured with the mounted example, route matching was half of the time a `CurrentUser` route
took (bench/RESULTS.md, issue 16).

`GateRouter.matches` first tests the path against the literal prefixes of its routes (a path a
route's pattern matches starts with the part of the route's path before its first `{`) and
answers `Match.NONE` at once for any other path; for the rest it matches as FastAPI does, in
the same order. It only ever skips routes that could not have matched, so which route answers
a request never changes. With a FastAPI that copies included routes into the application
instead, `matches` is not consulted and nothing changes either.
"""

from __future__ import annotations

from fastapi import APIRouter
from starlette.routing import BaseRoute, Match
from starlette.types import Scope

__all__ = ["GateRouter"]


def _literal_prefixes(routes: list[BaseRoute], outer: str = "") -> list[str] | None:
    """The part of each route's path before its first parameter, through included routers
    (FastAPI keeps those as entries with the router and the prefix it was included under);
    None when a route's path cannot be known (then every path is matched the usual way)."""
    found: list[str] = []
    for route in routes:
        path: str | None = getattr(route, "path", None)
        if path is not None:
            found.append(outer + path.split("{", 1)[0])
            continue
        inner = getattr(route, "original_router", None)
        prefix = getattr(getattr(route, "include_context", None), "prefix", None)
        if not isinstance(inner, APIRouter) or not isinstance(prefix, str):
            return None
        nested = _literal_prefixes(inner.routes, outer + prefix)
        if nested is None:
            return None
        found += nested
    return found


class GateRouter(APIRouter):
    """An `APIRouter` whose `matches` rejects, in one test, a path none of its routes has."""

    _prefixes: tuple[str, ...] | None = None
    _prefixes_of: int = -1

    def _route_prefixes(self) -> tuple[str, ...] | None:
        """The routes' literal prefixes, recomputed when routes were added; None when one
        route's path is unknown (then every path is matched the usual way)."""
        if self._prefixes_of != len(self.routes):
            found = _literal_prefixes(self.routes)
            # "/auth/sessions/" adds nothing to "/auth/sessions": keep the shortest of each.
            kept = sorted(set(found or ()))
            kept = [p for p in kept if not any(p != q and p.startswith(q) for q in kept)]
            self._prefixes = None if found is None else tuple(kept)
            self._prefixes_of = len(self.routes)
        return self._prefixes

    def matches(self, scope: Scope) -> tuple[Match, Scope]:
        prefixes = self._route_prefixes()
        # Under a root path (an app mounted below a prefix) the usual way decides.
        if prefixes is not None and scope.get("type") == "http" and not scope.get("root_path"):
            path: str = scope.get("path", "")
            if not path.startswith(prefixes):
                return Match.NONE, {}
        return super().matches(scope)
