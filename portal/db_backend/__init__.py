"""The portal's PostgreSQL backend (``ENGINE = "portal.db_backend"``): see ``base``."""
