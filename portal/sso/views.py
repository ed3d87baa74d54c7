"""Signing in with the identity provider: the redirect there, and the callback.

The callback refuses, with a page that says why in the reader's language (never a 500),
a state this session did not send or already used, a code the provider will not
exchange (used before, or expired), an ID token whose signature, nonce, issuer or
audience does not check out, a deactivated account and a provider that cannot be
reached. A refused callback writes nothing: the person, their identity and their roles
are written in one transaction after every check has passed.
"""

import logging
from typing import Any

import jwt
import requests
from django.core.exceptions import SuspiciousOperation
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils.translation import gettext as _
from mozilla_django_oidc.utils import import_from_settings
from mozilla_django_oidc.views import (
    OIDCAuthenticationCallbackView,
    OIDCAuthenticationRequestView,
)

from portal import languages
from portal.sso import config
from portal.sso.backends import SignInRefused

log = logging.getLogger(__name__)


def _reasons() -> dict[str, tuple[int, str]]:
    """Why a sign-in was refused → the answer's status and what the person reads."""
    again = _("Go back to the login page and sign in again.")
    return {
        "not_configured": (404, _("Single sign-on is not set up on this portal.")),
        "unreachable": (
            502,
            _("The identity provider could not be reached. Try again in a few minutes."),
        ),
        "denied": (403, _("The identity provider did not sign you in.") + " " + again),
        "expired": (
            400,
            _("This sign-in has expired or was already used.") + " " + again,
        ),
        "code_refused": (
            400,
            _(
                "The identity provider refused this sign-in: its code was already used or "
                "has expired."
            )
            + " "
            + again,
        ),
        "unverified": (
            400,
            _(
                "The answer from the identity provider could not be verified, so nobody was "
                "signed in. If this happens again, tell an administrator."
            ),
        ),
        "claims": (400, _("The identity provider's answer did not say who you are.")),
        "inactive": (
            403,
            _("This account is deactivated. Ask an administrator if you should have access."),
        ),
    }


def refused(request: HttpRequest, reason: str) -> HttpResponse:
    status, message = _reasons()[reason]
    return render(
        request,
        "sso/refused.html",
        {"message": message, "reason": reason, "status": status},
        status=status,
    )


class SignIn(OIDCAuthenticationRequestView):
    """Off to the provider's authorization endpoint, with a new state, nonce and PKCE
    challenge kept in this session."""

    def __init__(self, **kwargs: Any) -> None:
        # Not the library's, which reads the provider from the settings: ours is read
        # per request (portal.sso.config).
        super(OIDCAuthenticationRequestView, self).__init__(**kwargs)
        self.provider: config.Provider | None = None

    def get_settings(self, attr: str, *args: Any) -> Any:
        if attr == "OIDC_RP_SCOPES" and self.provider is not None:
            return self.provider.scopes
        return import_from_settings(attr, *args)

    def get(self, request: HttpRequest) -> HttpResponse:
        self.provider = config.current()
        if self.provider is None:
            return refused(request, "not_configured")
        try:
            found = config.endpoints(self.provider)
        except config.ProviderUnreachable as error:
            log.warning("OIDC discovery failed: %s", error)
            return refused(request, "unreachable")
        self.OIDC_OP_AUTH_ENDPOINT = found.authorization
        self.OIDC_RP_CLIENT_ID = self.provider.client_id
        return super().get(request)


class Callback(OIDCAuthenticationCallbackView):
    """The provider sends the person back here with a code and the state."""

    def get(self, request: HttpRequest) -> HttpResponse:
        if request.GET.get("error"):
            super().get(request)  # forgets the state, and signs out whoever was signed in
            return refused(request, "denied")
        state = request.GET.get("state")
        if not request.GET.get("code") or state not in request.session.get("oidc_states", {}):
            return refused(request, "expired")
        try:
            return super().get(request)
        except SignInRefused as error:
            reason = error.reason
        except (config.ProviderUnreachable, requests.ConnectionError, requests.Timeout):
            reason = "unreachable"
        except requests.HTTPError:
            reason = "code_refused"  # the token endpoint would not exchange the code
        except (SuspiciousOperation, jwt.PyJWTError, requests.RequestException, ValueError):
            reason = "unverified"
        log.warning("Single sign-on refused: %s", reason)
        return refused(request, reason)

    def login_failure(self) -> HttpResponse:
        # Reached past the state check only when the backend found nobody to sign in.
        return refused(self.request, "unverified")

    def login_success(self) -> HttpResponse:
        return languages.after_login(self.request, super().login_success())
