"""Messages in the team's chat: a project's channels (Slack, Feishu, DingTalk, WeCom,
e-mail, a signed JSON webhook), people's subscriptions to events on them, and the record
of each delivery. ``portal.notifications.notify`` reaches them through ``ChatChannel``."""
