"""GPU Portal: the Django project package and the people side (projects, roles, audit)."""

from portal.celery import app as celery_app

__all__ = ["celery_app"]
