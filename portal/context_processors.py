"""Navigation for the base layout, per role."""

from typing import Any

from django.http import HttpRequest

from portal import access


def navigation(request: HttpRequest) -> dict[str, Any]:
    user = request.user
    if not user.is_authenticated:
        return {}
    roles = access.roles(user)
    return {
        "nav": {
            "is_admin": access.is_admin(user),
            "is_finance": access.is_finance(user),
            "is_member": bool(roles),
            "is_manager": access.manages_any(user),
            "unread": user.notifications.filter(read_at__isnull=True).count(),
        }
    }
