"""Signing in with the company's OpenID Connect provider, and its groups as roles.

``config`` says which provider (the settings, else the admin's row) and finds its
endpoints; ``backends`` checks a callback (state, nonce, PKCE and the ID token's signature
are mozilla-django-oidc's; issuer, audience and the account are ours) and keeps local
password logins to the break-glass admin when they are switched off; ``roles`` sets a
person's roles from their groups at every login; ``views`` answers a bad callback with a
page that says why, having written nothing.
"""
