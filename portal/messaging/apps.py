from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class MessagingConfig(AppConfig):
    name = "portal.messaging"
    label = "messaging"
    verbose_name = _("Chat channels")

    def ready(self) -> None:
        # notify() finds its channels by name; the chat channel registers itself here so
        # that portal.notifications need not import this app (one way: messaging -> it).
        from portal import notifications  # noqa: PLC0415 (the app registry is ready only now)
        from portal.messaging.recording import ChatChannel  # noqa: PLC0415 (as above)

        notifications.CHANNELS["chat"] = ChatChannel
