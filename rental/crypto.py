"""Provider credentials at rest: the portal's encryption of secrets (``portal.crypto``),
kept here under rental's name for the code that stores and rotates them."""

from portal.crypto import decrypt, encrypt, rotate

__all__ = ["decrypt", "encrypt", "rotate"]
