"""Signing in with an OpenID Connect provider (``portal.sso``), and who may still log in
with a password, read from the environment (imported by ``portal.settings``;
docs/operations.md, "Single sign-on")."""

from django.core.exceptions import ImproperlyConfigured

from portal.env import env_bool, env_int, env_list, env_str

# The provider, as configuration: when PORTAL_OIDC_ISSUER is set these win and the
# admin's "Identity provider" page is not used; when it is empty, that page configures it.
PORTAL_OIDC_ISSUER = env_str("PORTAL_OIDC_ISSUER").rstrip("/")
PORTAL_OIDC_CLIENT_ID = env_str("PORTAL_OIDC_CLIENT_ID")
PORTAL_OIDC_CLIENT_SECRET = env_str("PORTAL_OIDC_CLIENT_SECRET")
PORTAL_OIDC_SCOPES = env_str("PORTAL_OIDC_SCOPES", "openid email profile")
PORTAL_OIDC_GROUPS_CLAIM = env_str("PORTAL_OIDC_GROUPS_CLAIM", "groups")
PORTAL_OIDC_NAME = env_str("PORTAL_OIDC_NAME", "single sign-on")
if PORTAL_OIDC_ISSUER and not (PORTAL_OIDC_CLIENT_ID and PORTAL_OIDC_CLIENT_SECRET):
    raise ImproperlyConfigured(
        "PORTAL_OIDC_ISSUER needs PORTAL_OIDC_CLIENT_ID and PORTAL_OIDC_CLIENT_SECRET."
    )
if PORTAL_OIDC_ISSUER and "openid" not in PORTAL_OIDC_SCOPES.split():
    raise ImproperlyConfigured("PORTAL_OIDC_SCOPES must include openid.")
# Groups that make their members admins, or finance, at every login (configuration as
# code; the admin's "Group roles" add to these, and map groups to project roles).
PORTAL_OIDC_ADMIN_GROUPS = env_list("PORTAL_OIDC_ADMIN_GROUPS")
PORTAL_OIDC_FINANCE_GROUPS = env_list("PORTAL_OIDC_FINANCE_GROUPS")
# Seconds the provider has to answer one call (discovery, keys, token, user info), and
# how long its discovery document is kept.
PORTAL_OIDC_TIMEOUT_SECONDS = env_int("PORTAL_OIDC_TIMEOUT_SECONDS", 10)
PORTAL_OIDC_DISCOVERY_CACHE_SECONDS = env_int("PORTAL_OIDC_DISCOVERY_CACHE_SECONDS", 3600)
for _name in ("PORTAL_OIDC_TIMEOUT_SECONDS", "PORTAL_OIDC_DISCOVERY_CACHE_SECONDS"):
    if globals()[_name] < 1:
        raise ImproperlyConfigured(f"{_name} must be at least 1 (seconds).")

# Local passwords: off, everyone signs in with the provider, except the one break-glass
# admin named here (for when the provider is down); others are told so on the login form.
PORTAL_PASSWORD_LOGIN = env_bool("PORTAL_PASSWORD_LOGIN", True)
PORTAL_BREAK_GLASS_USERNAME = env_str("PORTAL_BREAK_GLASS_USERNAME")

# mozilla-django-oidc: ID tokens signed with RS256, checked against the provider's keys
# (its jwks_uri); PKCE on top of state and nonce; every call bounded.
OIDC_RP_SIGN_ALGO = "RS256"
OIDC_USE_NONCE = True
OIDC_USE_PKCE = True
OIDC_TIMEOUT = PORTAL_OIDC_TIMEOUT_SECONDS
OIDC_AUTHENTICATION_CALLBACK_URL = "sso:callback"
OIDC_CREATE_USER = True
