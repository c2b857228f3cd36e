"""The pages a mailed link opens (contract §6): `/reset-password`, `/verify-email` and
`/confirm-email-change` (the paths are `AUTHGATE_RESET_PATH`, `…_VERIFY_PATH`,
`…_EMAIL_CHANGE_PATH`).

GET and HEAD only look: mail scanners fetch links (HEAD first, some), and run their
JavaScript, so they show the form, or say up front that the link has expired or was used (a
read-only lookup), and never spend, change or extend the token. Nothing submits on load. Only a
person's click on the form's button, a plain POST to the same path that works without
JavaScript, spends it, through the same service call as the JSON confirm endpoint. Every
outcome is a page with its status: 200 done, 400 invalid/expired/used, 403 a form that fails
its CSRF check, 409 the new address was taken meanwhile, 422 a password the rules refuse (the
form again), 429/503 with `Retry-After`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from fastapi import APIRouter, Request, Response
from fastapi.responses import HTMLResponse

from authgate.errors import (
    EmailTaken,
    InvalidOneTimeToken,
    PasswordRejected,
    RateLimited,
    ServiceUnavailable,
)
from authgate.web.pages.forms import FormProblem, one_time_token, read_form

if TYPE_CHECKING:
    from authgate.app import AuthGate
    from authgate.mail.delivery import Purpose
    from authgate.services.accounts import TokenStatus
    from authgate.web.pages.csrf import FormGuard
    from authgate.web.pages.rendering import Pages

__all__ = ["LinkPages"]

_Handler = Callable[[Request], Awaitable[Response]]

#: Longest field values a person could honestly send (passwords are at most 72 bytes; a
#: longer one gets the rules' own 422).
_TOKEN_LEN, _CSRF_LEN, _PASSWORD_LEN = 128, 128, 1024


@dataclass(frozen=True, slots=True)
class _Link:
    purpose: Purpose
    template: str
    title: str
    done_title: str
    done_message: str
    done_link: tuple[str, str]
    #: Where to ask for a new link.
    again: tuple[str, str]


_LINKS: dict[Purpose, _Link] = {
    "reset": _Link(
        "reset",
        "reset_password.html",
        "Choose a new password",
        "Your password has been reset",
        "Every session of your account has been signed out. Sign in with the new password.",
        ("/login", "Sign in"),
        ("/forgot-password", "Ask for a new link"),
    ),
    "verify": _Link(
        "verify",
        "verify_email.html",
        "Confirm your email address",
        "Your email address is verified",
        "Thank you: your email address is confirmed.",
        ("/account", "Go to your account"),
        ("/account", "Go to your account"),
    ),
    "email_change": _Link(
        "email_change",
        "confirm_email_change.html",
        "Confirm your new email address",
        "Your email address has been changed",
        "Sign in with the new address from now on.",
        ("/account", "Go to your account"),
        ("/account", "Go to your account"),
    ),
}
_NOT_LIVE: dict[str, tuple[str, str]] = {
    "invalid": (
        "This link is not valid",
        "The link is incomplete or unknown. Check that you opened the whole link from the "
        "email, or ask for a new one.",
    ),
    "expired": ("This link has expired", "Links are valid for a limited time; ask for a new one."),
    "used": ("This link was already used", "Each link works once; ask for a new one if needed."),
}


class LinkPages:
    def __init__(self, gate: AuthGate, pages: Pages, guard: FormGuard) -> None:
        self.gate, self.pages, self.guard = gate, pages, guard
        config = gate.config
        self.paths: dict[Purpose, str] = {
            "reset": config.reset_path,
            "verify": config.verify_path,
            "email_change": config.email_change_path,
        }

    def router(self) -> APIRouter:
        router = APIRouter(include_in_schema=False)
        for purpose, path in self.paths.items():
            router.add_api_route(path, self._show(_LINKS[purpose]), methods=["GET", "HEAD"])
            router.add_api_route(path, self._submit(_LINKS[purpose]), methods=["POST"])
        return router

    # --- GET and HEAD: look, never touch ------------------------------------------------

    def _show(self, link: _Link) -> _Handler:
        async def show(request: Request) -> Response:
            given = request.query_params.getlist("token")
            token = one_time_token(given[0]) if len(given) == 1 else None
            if token is None:
                return self._not_live(link, "invalid")
            status = await self.gate.accounts.token_status(link.purpose, token)
            if status != "live":
                return self._not_live(link, status)
            return self._form(request, link, token)

        return show

    def _form(
        self, request: Request, link: _Link, token: str, *, error: str | None = None
    ) -> HTMLResponse:
        nonce = self.guard.nonce(request)
        response = self.pages.render(
            link.template,
            title=link.title,
            status=200 if error is None else 422,
            action=self.paths[link.purpose],
            token=token,
            csrf=self.guard.field(nonce, link.purpose, token),
            error=error,
        )
        self.guard.set_cookie(response, nonce)
        return response

    # --- POST: a person's click spends the link -----------------------------------------

    def _submit(self, link: _Link) -> _Handler:
        limits = {"token": _TOKEN_LEN, "csrf": _CSRF_LEN}
        if link.purpose == "reset":
            limits |= {"new_password": _PASSWORD_LEN, "confirm_password": _PASSWORD_LEN}

        async def submit(request: Request) -> Response:
            try:
                form = await read_form(request, limits)
            except FormProblem as problem:
                return self.pages.message(
                    "bad_request",
                    title="The form could not be read",
                    message=problem.detail,
                    status=problem.status,
                )
            token = one_time_token(form["token"])
            if token is None:
                return self._not_live(link, "invalid")
            if not self.guard.check(request, form["csrf"], link.purpose, token):
                # Nothing was spent: opening the link again gives a fresh form.
                return self.pages.message(
                    "csrf_failed",
                    title="This form has expired",
                    message="For your safety the form was not accepted. Open the link from "
                    "the email again and submit the form from there.",
                    status=403,
                )
            return await self._confirm(request, link, token, form)

        return submit

    async def _confirm(
        self, request: Request, link: _Link, token: str, form: dict[str, str]
    ) -> Response:
        try:
            if link.purpose == "reset":
                if form["new_password"] != form["confirm_password"]:
                    return await self._again(request, link, token, "The passwords do not match.")
                await self.gate.accounts.confirm_password_reset(token, form["new_password"])
            elif link.purpose == "verify":
                await self.gate.accounts.confirm_verification(token)
            else:
                await self.gate.self_service.confirm_email_change(token)
        except PasswordRejected as exc:
            return await self._again(request, link, token, exc.detail)
        except InvalidOneTimeToken:
            # Which of the three, read-only (a token live again here is a race: invalid).
            status = await self.gate.accounts.token_status(link.purpose, token)
            return self._not_live(link, "invalid" if status == "live" else status)
        except EmailTaken:
            return self.pages.message(
                "email_taken",
                title="This address is already in use",
                message="Another account uses this email address now, so yours was not "
                "changed. Choose another address from your account page.",
                status=409,
                link=("/account", "Go to your account"),
            )
        except (RateLimited, ServiceUnavailable) as exc:
            return self._try_later(exc)
        done_href, done_label = link.done_link
        return self.pages.message(
            "done",
            title=link.done_title,
            message=link.done_message,
            status=200,
            link=(done_href, done_label),
        )

    async def _again(self, request: Request, link: _Link, token: str, error: str) -> HTMLResponse:
        """The form once more with `error` (422), while the link can still be used; else what
        became of it (the password rules are checked before the token is)."""
        status = await self.gate.accounts.token_status(link.purpose, token)
        if status != "live":
            return self._not_live(link, status)
        return self._form(request, link, token, error=error)

    # --- outcomes ---------------------------------------------------------------------

    def _not_live(self, link: _Link, status: TokenStatus) -> HTMLResponse:
        title, message = _NOT_LIVE["invalid" if status == "live" else status]
        return self.pages.message(status, title=title, message=message, status=400, link=link.again)

    def _try_later(self, exc: RateLimited | ServiceUnavailable) -> HTMLResponse:
        limited = isinstance(exc, RateLimited)
        return self.pages.message(
            "rate_limited" if limited else "unavailable",
            title="Too many attempts" if limited else "Please try again shortly",
            message="Wait a little, then submit the form again."
            if limited
            else "The service is busy or briefly unavailable; nothing was changed.",
            status=exc.status_code,
            headers={"Retry-After": str(exc.retry_after)},
        )
