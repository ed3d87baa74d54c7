"""Access-matrix rules for single sign-on (portal.sso). ROLES order: engineer, other
engineer, manager, admin, finance, anonymous. Both URLs are public: the way to sign in.
This world has no identity provider configured, so "Sign in with …" answers 404 with a
page saying so, and a callback this browser never started is refused (400)."""

from tests.access.spec import Expect

RULES: dict[str, Expect] = {
    "sso:sign_in": Expect(
        get=(404,) * 6,
        post=(405,) * 6,
        note="Public; without a provider configured, a page saying single sign-on is not set up.",
    ),
    "sso:callback": Expect(
        get=(400,) * 6,
        post=(405,) * 6,
        note="Public; a callback with no state this browser sent is refused, writing nothing.",
    ),
}
