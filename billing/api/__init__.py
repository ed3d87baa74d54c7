"""The money side's REST API (v1): modules named in ``portal.api.urls.API_MODULES``."""
