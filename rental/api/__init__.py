"""The compute side's REST API (v1): one module per resource, mounted by portal/api/urls.py."""
